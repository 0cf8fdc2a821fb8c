#!/usr/bin/env bash
# Set up conveyor in ./.venv on a fresh machine.
#   bash scripts/setup.sh          conveyor and its dependencies
#   bash scripts/setup.sh --test   also pytest, the PyG baseline's compiled extras (torch_scatter,
#                                  torch_sparse: ~20 min to build once, then pip's wheel cache makes
#                                  it instant) and the offline Planetoid files the tests read.
# Torch is installed first and pinned for every later install, so no dependency can swap it for
# another build. CONVEYOR_TORCH picks it (default torch==2.13.0; e.g. a CUDA build on a GPU host).
set -euo pipefail
cd "$(dirname "$0")/.."
with_tests=false
[ "${1:-}" = "--test" ] && with_tests=true

[ -x .venv/bin/python ] || python3 -m venv .venv
py=.venv/bin/python
$py -m pip install -q "${CONVEYOR_TORCH:-torch==2.13.0}"
$py -c "import torch; print('torch==' + torch.__version__)" > .venv/constraints.txt
if $with_tests; then
    $py -m pip install -q -c .venv/constraints.txt -e ".[test]"
    # Side by side: the two builds dominate a fresh setup. --no-deps: each installs only itself.
    pids=()
    for pkg in torch_scatter==2.1.2 torch_sparse==0.6.18; do
        $py -m pip install -q --no-build-isolation --no-deps -c .venv/constraints.txt "$pkg" &
        pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
    $py scripts/prepare_planetoid.py --root .cache/data
else
    $py -m pip install -q -c .venv/constraints.txt -e .
fi
echo "conveyor is set up in .venv ($(cat .venv/constraints.txt))"
