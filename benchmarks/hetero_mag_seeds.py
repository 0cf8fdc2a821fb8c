"""hetero/to_hetero_mag.py's model and training loop, in one process on both loaders over many
seeds: is its validation accuracy after 3 epochs the loader's or the script's own variance?

The example's figure (benchmarks/pyg_examples.py) is a validation accuracy after 3 epochs of 2
steps each, from a lazily initialised model: one run per loader and seed is a draw from a wide
distribution. Here the same model (the script's `Sequential` of SAGEConv((-1, -1), 64), ReLU,
SAGEConv((-1, -1), 64), ReLU, Linear(-1, classes), written as a Module, through `to_hetero(...,
aggr='sum')`), the same lazy initialisation from one batch, Adam at 0.01, the same loaders'
arguments (`num_neighbors=[10] * 2`, batches of 1024, `shuffle=True` for training) on the same
stand-in data (tests/data/pyg_examples/synthetic_datasets.py, `ToUndirected(merge=True)`) run
with `num_workers=0` (conveyor: serial) for `--seeds` seeds, each seeding Python, numpy and torch
as the examples' rounds do (benchmarks/seeded_rounds.py), the loaders alternating first.

    python -m benchmarks.hetero_mag_seeds --seeds 20

Writes benchmarks/results/to_hetero_mag_seeds.json and .md (mean ± sd, range, the difference
and the verdict of seeded_rounds.py).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from benchmarks.seeded_rounds import SEED_PRELUDE, Spread, Verdict, round_order

REPO = Path(__file__).resolve().parents[1]
STAND_INS = REPO / "tests" / "data" / "pyg_examples" / "synthetic_datasets.py"


def mag_data():
    """The examples' OGB_MAG stand-in, made undirected as to_hetero_mag.py's transform does."""
    import torch_geometric.transforms as T
    spec = importlib.util.spec_from_file_location("stand_ins", STAND_INS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.meta_path[:] = [f for f in sys.meta_path if type(f).__name__ != "PatchOnImport"]  # its import hook: off
    return T.ToUndirected(merge=True)(module.synthetic_mag_data())


class Net(torch.nn.Module):
    """to_hetero_mag.py's Sequential, as a Module (torch.fx traces it the same way)."""

    def __init__(self, classes: int):
        from torch_geometric.nn import Linear, SAGEConv
        super().__init__()
        self.conv1, self.conv2, self.lin = SAGEConv((-1, -1), 64), SAGEConv((-1, -1), 64), Linear(-1, classes)

    def forward(self, x, edge_index):
        x = self.conv1(x, edge_index).relu()
        return self.lin(self.conv2(x, edge_index).relu())


def val_accuracy(loader_class, data, seed: int, epochs: int = 3) -> float:
    """The script's run on `loader_class`: lazy init from one batch, `epochs` epochs, val accuracy."""
    from torch_geometric.nn import to_hetero
    namespace = {}
    exec(SEED_PRELUDE, namespace)
    namespace["seed_everything"](seed)
    kwargs = {"num_neighbors": [10] * 2, "batch_size": 1024, "num_workers": 0}
    train = loader_class(data, shuffle=True, input_nodes=("paper", data["paper"].train_mask), **kwargs)
    val = loader_class(data, input_nodes=("paper", data["paper"].val_mask), **kwargs)
    model = to_hetero(Net(int(data["paper"].y.max()) + 1), data.metadata(), aggr="sum")
    with torch.no_grad():
        batch = next(iter(train))
        model(batch.x_dict, batch.edge_index_dict)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        model.train()
        for batch in train:
            optimizer.zero_grad()
            size = batch["paper"].batch_size
            out = model(batch.x_dict, batch.edge_index_dict)["paper"][:size]
            F.cross_entropy(out, batch["paper"].y[:size]).backward()
            optimizer.step()
    return accuracy(model, val)


@torch.no_grad()
def accuracy(model, loader) -> float:
    model.eval()
    correct = total = 0
    for batch in loader:
        size = batch["paper"].batch_size
        pred = model(batch.x_dict, batch.edge_index_dict)["paper"][:size].argmax(-1)
        correct, total = correct + int((pred == batch["paper"].y[:size]).sum()), total + size
    return correct / total


def markdown(found: dict, meta: dict) -> str:
    spreads = {name: Spread.of(values) for name, values in found.items()}
    return "\n".join([
        "# to_hetero_mag.py's model and loop in one process, both loaders, many seeds", "",
        f"`{meta['command']}`", "", __doc__.split("\n\n")[1].replace("\n", " "), "",
        f"{meta['seeds']} seeds; {meta['threads']} torch thread; load {meta['load_before']} before, "
        f"{meta['load_after']} after; {meta['seconds']:.0f} s.", "",
        "| loader | val acc after 3 epochs: mean ± sd (range; n) |", "|---|---|",
        *(f"| {name} | {spread.text(4)} |" for name, spread in spreads.items()), "",
        f"conveyor - PyG: {Verdict.of(spreads['conveyor'], spreads['pyg']).text(4)} "
        f"(verdict: benchmarks/seeded_rounds.py).", ""])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "to_hetero_mag_seeds.json")
    args = parser.parse_args(argv)
    from torch_geometric.loader import NeighborLoader as PyGNeighborLoader

    from conveyor import NeighborLoader
    torch.set_num_threads(1)
    data, classes = mag_data(), {"conveyor": NeighborLoader, "pyg": PyGNeighborLoader}
    found, load, start = {"conveyor": [], "pyg": []}, os.getloadavg()[0], time.perf_counter()
    for seed in range(args.seeds):
        for name in round_order(["conveyor", "pyg"], seed):
            found[name].append(val_accuracy(classes[name], data, seed))
        print(seed, {k: v[-1] for k, v in found.items()}, flush=True)
    meta = {"command": "python -m benchmarks.hetero_mag_seeds " + " ".join(argv if argv is not None else sys.argv[1:]),
            "seeds": args.seeds, "threads": 1, "load_before": round(load, 1),
            "load_after": round(os.getloadavg()[0], 1), "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps({"meta": meta, "val_acc": found}, indent=1))
    args.out.with_suffix(".md").write_text(markdown(found, meta))
    print(markdown(found, meta))


if __name__ == "__main__":
    main()
