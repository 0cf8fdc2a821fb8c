"""DGL's rows of the loader benchmark (benchmarks/loader.py), run by a separate interpreter with
dgl 2.1 and torch 2.2 (DGL's registry builds stop at torch 2.2, so it cannot share conveyor's):
it imports neither conveyor nor the benchmarks package, only torch, numpy and dgl.

It reads the graph benchmarks/loader.py saved (`indptr`, `indices`: CSC, sources by destination;
`x`, `y`, `train_idx`, as .npy) and runs DGL's `DataLoader` with its `NeighborSampler` over the
training nodes (shuffled), as a DGL user writes it: fanouts reversed (DGL lists them from the
input layer; PyG's first entry is the seeds' hop), the features and labels gathered by the
sampler (`prefetch_node_feats`, `prefetch_labels`), `num_workers` persistent workers. The
figures it writes have the same keys as benchmarks/loader.py's workers'.

    <dgl python> benchmarks/loader_dgl.py --graph DIR --workers 2 --result OUT.json ...
"""
import argparse
import json
import os
import time

import dgl
import numpy as np
import torch


def parse_args():
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("--graph", "--result", "--device"):
        p.add_argument(name, required=True)
    for name in ("--workers", "--batch-size", "--seed"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--fanouts", required=True)
    p.add_argument("--threads", type=int, default=None)
    return p.parse_args()


def load_graph(directory: str):
    arrays = {name: torch.from_numpy(np.load(os.path.join(directory, f"{name}.npy")))
              for name in ("indptr", "indices", "x", "y", "train_idx")}
    indptr, indices = arrays["indptr"].long(), arrays["indices"].long()
    g = dgl.graph(("csc", (indptr, indices, torch.arange(indices.numel()))), num_nodes=indptr.numel() - 1)
    g.ndata["feat"], g.ndata["label"] = arrays["x"], arrays["y"]
    return g, arrays["train_idx"]


def iterate(iterator, device) -> dict:
    """One epoch (or its rest after the first batch), each batch's features and labels on the device."""
    start, batches, nodes = time.perf_counter(), 0, 0
    for _, _, blocks in iterator:
        x = blocks[0].srcdata["feat"].to(device)
        blocks[-1].dstdata["label"].to(device)
        nodes += x.size(0)
        batches += 1
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "batches": batches, "batches_per_s": batches / seconds,
            "nodes_per_batch": nodes / max(batches, 1)}


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    g, train_idx = load_graph(args.graph)
    figures = {"how": {"workers": args.workers, "persistent_workers": args.workers > 0, "dgl": dgl.__version__,
                       "torch": torch.__version__}, "torch_threads": torch.get_num_threads(),
               "load_before": os.getloadavg()}
    start = time.perf_counter()
    sampler = dgl.dataloading.NeighborSampler([int(f) for f in reversed(args.fanouts.split(","))],
                                              prefetch_node_feats=["feat"], prefetch_labels=["label"])
    loader = dgl.dataloading.DataLoader(g, train_idx, sampler, batch_size=args.batch_size, shuffle=True,
                                        drop_last=False, num_workers=args.workers,
                                        persistent_workers=args.workers > 0)
    iterator = iter(loader)
    _, _, blocks = next(iterator)
    blocks[0].srcdata["feat"].to(args.device)
    figures["first_batch_s"] = time.perf_counter() - start
    rest = iterate(iterator, args.device)
    figures["epoch1"] = {**rest, "seconds": figures["first_batch_s"] + rest["seconds"], "batches": rest["batches"] + 1}
    figures["epoch2"] = iterate(iter(loader), args.device)
    start = time.perf_counter()
    del iterator, loader
    figures["close_s"] = time.perf_counter() - start
    figures["load_after"] = os.getloadavg()
    with open(args.result, "w") as f:
        json.dump(figures, f)


if __name__ == "__main__":
    main()
