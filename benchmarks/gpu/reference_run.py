"""The PyG reference loop alone (compare/reference.py: NeighborLoader, PyG's GraphSAGE, Adam), on
the config that `launch.py OVERRIDE ...` would compose, as conveyor's `mode=compare` runs it:
its loader's worker processes are `compare.pyg_workers` (auto: as PyG's ogbn-products example,
12, where the machine has the cores).

    python -m benchmarks.gpu.reference_run --out DIR [compare.pyg_workers=N] OVERRIDE ...

Writes DIR/metrics.json (the shape conveyor's runs write; `final.setup.workers`: the workers it
used) and prints `final` as one JSON line.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path)
    args, overrides = p.parse_known_args()
    from conveyor.compare.reference import train_reference
    from conveyor.config import load_settings
    from conveyor.core.device import resolve_device, use_device
    from conveyor.partition.datasets import load_configured
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_settings(overrides)  # as launch.py builds the settings (resolvers, one-paragraph errors)
    device = use_device(resolve_device(cfg.run.device))
    graph = load_configured(cfg.data)
    result = train_reference(cfg, cfg.compare, graph, args.out, device)
    print(json.dumps(result["final"]))


if __name__ == "__main__":
    main()
