"""Prepare Cora, CiteSeer and PubMed offline, from a checkout: the package's command
`conveyor prepare planetoid --root DIR [--wheel PATH]` (conveyor/partition/datasets/planetoid_files.py),
kept for scripts/setup.sh and tests/conftest.py, which run it with the venv's python after the
checkout is installed there (editable).

    python scripts/prepare_planetoid.py --root DIR [--wheel PATH]
"""
import sys

from conveyor.cli import prepare

if __name__ == "__main__":
    prepare(["planetoid", *sys.argv[1:]])
