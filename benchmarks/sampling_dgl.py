"""DGL's rows of the sampler benchmark (benchmarks/sampling.py), run by a separate interpreter with
dgl 2.1 and torch 2.2 (DGL's registry builds stop at torch 2.2, so it cannot share conveyor's):
it imports neither conveyor nor the benchmarks package, only torch, numpy and dgl.

It reads the graph benchmarks/sampling.py saved (`indptr`, `indices`: CSC, sources by
destination, as .npy) into a DGL graph with the ids each row asks for (int32, DGL's faster
path, or int64), then answers requests, one JSON object a line on stdin, one a line on stdout,
so that the benchmark can interleave DGL's rounds with conveyor's:

    {"row": "dgl", "seeds": "batches.npy", "fanouts": [15, 10, 5], "ids": "int32", "fused": true}
                                  a row: its seed batches ([batches, batch_size]); samples one untimed
    {"row": "dgl", "first": 1, "count": 20}
                                  times the row's batches first..first+count-1
    {}                                                 (an empty line) ends

DGL's stock `NeighborSampler`: in-neighbours without replacement, every node of a hop's frontier
drawing again (as bsp); DGL lists fanouts from the input layer, so conveyor's hop-1 fanout comes
last. `fused`: its default, one fused call a hop where it has more than one thread (DGL's
sample_neighbors_fused), or not. The process runs at the thread count it is started with (`--threads`: torch's and DGL's
OpenMP pool).

    <dgl python> benchmarks/sampling_dgl.py --graph DIR --threads 1 --seed 0
"""
import argparse
import json
import os
import sys
import time

import dgl
import numpy as np
import torch


def load_graph(directory: str, ids: torch.dtype):
    indptr, indices = (torch.from_numpy(np.load(os.path.join(directory, f"{name}.npy"))).to(ids)
                       for name in ("indptr", "indices"))
    edge_ids = torch.arange(indices.numel(), dtype=ids)
    return dgl.graph(("csc", (indptr, indices, edge_ids)), num_nodes=indptr.numel() - 1, idtype=ids)


def timed(sampler, graph, batches) -> dict:
    start, nodes, edges = time.perf_counter(), 0, 0
    for seeds in batches:
        input_nodes, _, blocks = sampler.sample(graph, seeds)
        nodes += input_nodes.numel()
        edges += sum(block.num_edges() for block in blocks)
    return {"seconds": time.perf_counter() - start, "nodes": nodes, "edges": edges}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--graph", required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    dgl.utils.set_num_threads(args.threads)
    dgl.seed(args.seed)
    reply({"dgl": dgl.__version__, "torch": torch.__version__, "threads": args.threads})
    graphs, rows = {}, {}
    for line in sys.stdin:
        request = json.loads(line) if line.strip() else {}
        if not request:
            break
        if "seeds" in request:
            ids = getattr(torch, request["ids"])
            graphs[ids] = graphs.get(ids) or load_graph(args.graph, ids)
            sampler = dgl.dataloading.NeighborSampler(list(reversed(request["fanouts"])), fused=request["fused"])
            rows[request["row"]] = (sampler, graphs[ids], torch.from_numpy(np.load(request["seeds"])).to(ids))
            reply(timed(*rows[request["row"]][:2], rows[request["row"]][2][:1]))  # untimed: set-up
        else:
            sampler, graph, batches = rows[request["row"]]
            reply(timed(sampler, graph, batches[request["first"]: request["first"] + request["count"]]))


def reply(message: dict) -> None:
    print(json.dumps(message), flush=True)


if __name__ == "__main__":
    main()
