"""The CPU training step of the built-in GraphSAGE and GCN (trainer/models/sparse.py: sums by a
sparse-matrix product) against the same model on PyG's stock layers, on the same batches; and of
the typed models (`hetero-sage`: to_hetero(GraphSAGE), `rgcn`: R-GCN, trainer/models/hetero.py).

    python -m benchmarks.train_step --data-root data --scale 0.05 --threads 1,2
    python -m benchmarks.train_step --models hetero-sage,rgcn --typed-scale 0.02 --fanouts 10,10 --hidden 64

The typed rows run on the ogbn-mag-shaped synthetic graph (`synthetic_mag` at --typed-scale; the
seeds papers, drawn by bsp relation by relation), each model as the trainer runs it (`TypedGNN`, hop
by hop, a featureless type's embedding too) against a copy with the same weights whose layers sum
as before, by PyG's own: each to_hetero relation's `SAGEConv` forward (summed per destination type
as to_hetero sums them), R-GCN's means by PyG's `scatter` (gather every edge's source row, scatter
into the targets). There is no typed GCN row: PyG's to_hetero(GCN) refuses GCNConv on a typed
graph (its self-loops on any relation "lead to incorrect message passing", and without them
GCNConv takes no bipartite (x_src, x_dst) inputs, which every to_hetero relation hands it); R-GCN,
the relational GCN, is the typed graph's GCN-like model.

Batches of the synthetic products-shaped graph (--fanouts, --batch-size seeds, drawn by bsp). Per
model, two with the same initial weights: conveyor's `SampledGNN` and PyG's stock
`GraphSAGE`/`GCN` run hop by hop through `PerHopGNN` (each layer PyG's own `SAGEConv`/`GCNConv`
forward: gather every edge's source row, scatter into the targets; the structure the built-in
models had before, so the two differ only in the layers' sums). Their outputs on the first batch
are checked equal (1e-4) before anything is timed. A step: forward, cross-entropy on the seeds,
backward, an Adam step; both use conveyor's dropout masks (the built-in models' default). The two
alternate, --rounds rounds of one step on each batch each, after an untimed round; the median
round, its range, and the median of the rounds' ratios (conveyor / stock layers) are reported, by
the wall clock and by the process's CPU time (on a shared machine the wall clock also counts other
processes' turns on the cores). Each row says its thread count and the 1-minute load average when
it started and ended. Writes JSON and a
Markdown table (default benchmarks/results/train_step_cpu_s<scale>.json, .md).
"""
from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch_geometric.nn import GCN, GraphSAGE, to_hetero
from torch_geometric.utils import scatter

from conveyor.partition.datasets import load_dataset
from conveyor.partition.hetero import EDGE_TYPE, flat_features
from conveyor.samplers import build_sampler
from conveyor.trainer.models.adapter import PerHopGNN
from conveyor.trainer.models.dropout import relu_dropout
from conveyor.trainer.models.hetero import RGCN, HeteroBasicGNN, TypedGNN, feature_widths, key, wrap_typed
from conveyor.trainer.models.sampled import SampledGNN

STOCK = {"sage": GraphSAGE, "gcn": GCN}
TYPED = ("hetero-sage", "rgcn")


class StockHeteroBasicGNN(HeteroBasicGNN):
    """to_hetero's layer as before the CSR products: each relation's SAGEConv by PyG's own forward."""

    takes_adjacency = False

    def typed_layer(self, layer, x, num_dst, edge_index):
        convs, out = self.module.convs[layer], {}
        for edge_type, edges in edge_index.items():
            src, _, dst = edge_type
            y = convs[key(edge_type)]((x[src], x[dst][:num_dst[dst]]), edges)
            out[dst] = y if dst not in out else out[dst] + y
        if layer < self.num_layers - 1:
            out = {t: self.between_layers(layer, t, v) for t, v in out.items()}
        return out


class StockRGCN(RGCN):
    """R-GCN's layer as before the CSR products: each relation's mean by PyG's scatter."""

    takes_adjacency = False

    def typed_layer(self, layer, x, num_dst, edge_index):
        out = {t: self.root[layer][t](x[t][:num_dst[t]]) for t in self.node_types if t in x}
        for edge_type, edges in edge_index.items():
            src, _, dst = edge_type
            mean = scatter(x[src].index_select(0, edges[0]), edges[1], 0, dim_size=num_dst[dst], reduce="mean")
            out[dst] = out[dst] + self.rel[layer][key(edge_type)](mean)
        if layer < self.num_layers - 1:
            out = {t: relu_dropout(v, self.dropout, self.training, self.fast_dropout) for t, v in out.items()}
        return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data-root", default="data", help="where the synthetic graph is cached")
    p.add_argument("--scale", type=float, default=0.05, help="synthetic graph scale, 1.0 = products")
    p.add_argument("--models", default="sage,gcn", help="comma-separated: sage, gcn, hetero-sage, rgcn")
    p.add_argument("--typed-scale", type=float, default=0.02, help="synthetic_mag scale of the typed rows")
    p.add_argument("--batch-size", type=int, default=1024)
    p.add_argument("--fanouts", default="15,10,5")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batches", type=int, default=3, help="batches a round")
    p.add_argument("--threads", default="1,2", help="torch CPU threads, comma-separated for several")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="JSON path")
    return p.parse_args(argv)


def twin_models(kind: str, in_dim: int, hidden: int, out_dim: int, num_layers: int, seed: int):
    """conveyor's built-in model and PyG's stock one (hop by hop), with the same weights."""
    torch.manual_seed(seed)
    ours = SampledGNN(kind, in_dim, hidden, out_dim, num_layers, dropout=0.5)
    stock = PerHopGNN(STOCK[kind](in_dim, hidden, num_layers, out_dim, dropout=0.5), fast_dropout=True)
    stock.gnn.convs.load_state_dict(ours.layers.state_dict())
    return ours, stock


def typed_twins(kind: str, graph, hidden: int, num_layers: int, seed: int):
    """The typed model as the trainer builds it (trainer/models/hetero.py typed_model) and a copy,
    the same weights, whose layers sum by PyG's own (StockHeteroBasicGNN, StockRGCN)."""
    torch.manual_seed(seed)
    schema, widths = graph.schema, feature_widths(graph)
    metadata, classes = (list(schema.node_types), list(schema.edge_types)), int(graph.num_classes)
    embedding = max(widths.values())
    if kind == "rgcn":
        inputs = {t: widths.get(t, embedding) for t in schema.node_types}
        ours = TypedGNN(RGCN(metadata, inputs, hidden, classes, num_layers, fast_dropout=True), schema, widths,
                        embedding)
    else:
        ours = wrap_typed(to_hetero(GraphSAGE((-1, -1), hidden, num_layers, classes, dropout=0.5), metadata,
                                    aggr="sum"), graph, embedding, fast_dropout=True)
        assert isinstance(ours, TypedGNN), "to_hetero(GraphSAGE) runs layer by layer"
    stock = copy.deepcopy(ours)
    stock.inner.__class__ = StockRGCN if kind == "rgcn" else StockHeteroBasicGNN  # the same modules, PyG's sums
    return ours, stock


def call(model, batch):
    """The model's forward as the trainer calls it on this batch (typed models: n_id and relations too)."""
    if "edge_type" in batch:
        return model(batch["x"], batch["layers"], batch["n_id"], batch["edge_type"])
    return model(batch["x"], batch["layers"])


def same_outputs(ours, stock, batch) -> float:
    """The largest difference of the two models' outputs on a batch (evaluation mode: no dropout)."""
    ours.eval(), stock.eval()
    with torch.no_grad():
        gap = (call(ours, batch) - call(stock, batch)).abs().max().item()
    ours.train(), stock.train()
    return gap


def round_of_steps(model, optimizer, batches) -> tuple:
    """Seconds for one training step on each batch: wall-clock, and this process's CPU time (on a
    shared machine the wall clock also counts the time other processes held the cores)."""
    start, cpu = time.perf_counter(), time.process_time()
    for batch in batches:
        loss = F.cross_entropy(call(model, batch), batch["y"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return time.perf_counter() - start, time.process_time() - cpu


def measure(kind: str, graph, batches, args, threads: int) -> dict:
    torch.set_num_threads(threads)
    row = {"model": kind, "threads": threads, "load_1min": os.getloadavg()[0]}
    ours, stock = (typed_twins(kind, graph, args.hidden, len(args.fanouts), args.seed) if kind in TYPED else
                   twin_models(kind, graph.x.size(1), args.hidden, int(graph.y.max()) + 1, len(args.fanouts),
                               args.seed))
    row["max_output_gap"] = same_outputs(ours, stock, batches[0])
    if row["max_output_gap"] > 1e-4:
        raise SystemExit(f"{kind}: conveyor's and the stock layers' outputs differ by {row['max_output_gap']:.2g}")
    optimizers = {name: torch.optim.Adam(m.parameters(), lr=0.003) for name, m in (("ours", ours), ("stock", stock))}
    round_of_steps(ours, optimizers["ours"], batches), round_of_steps(stock, optimizers["stock"], batches)
    seconds, cpu = {"ours": [], "stock": []}, {"ours": [], "stock": []}
    for _ in range(args.rounds):
        for name, model in (("stock", stock), ("ours", ours)):
            wall, used = round_of_steps(model, optimizers[name], batches)
            seconds[name].append(wall), cpu[name].append(used)
    per_step = {name: [1000 * s / len(batches) for s in values] for name, values in seconds.items()}
    ratios = [o / s for o, s in zip(seconds["ours"], seconds["stock"])]
    cpu_ratios = [o / s for o, s in zip(cpu["ours"], cpu["stock"])]
    return dict(row, conveyor_ms=statistics.median(per_step["ours"]), conveyor_range=[min(per_step["ours"]),
                max(per_step["ours"])], stock_ms=statistics.median(per_step["stock"]),
                stock_range=[min(per_step["stock"]), max(per_step["stock"])], ratio=statistics.median(ratios),
                ratios=ratios, cpu_ratio=statistics.median(cpu_ratios), cpu_ratios=cpu_ratios,
                load_1min_at_end=os.getloadavg()[0])


def draw_batches(graph, args, typed: bool = False) -> list:
    sampler = build_sampler("bsp", graph, args.fanouts, seed=args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    order = graph.train_idx[torch.randperm(graph.train_idx.numel(), generator=gen)]
    batches = []
    for i in range(args.batches):
        sampled = sampler.sample(order[i * args.batch_size:(i + 1) * args.batch_size])
        batches.append({"x": None if typed else graph.x[sampled.n_id], "layers": list(sampled.layers()),
                        "y": graph.y[sampled.n_id[:args.batch_size]].long(), "edges": sampled.num_sampled_edges,
                        "n_id": sampled.n_id, "positions": sampled.edge_pos_per_hop})
    return batches


def draw_typed_batches(graph, args) -> list:
    """Batches of the typed graph's training papers as the trainer's typed models take them: the
    flat typed features of n_id (cache/typed.py's layout), each layer's edges and relations."""
    batches = draw_batches(graph, args, typed=True)
    relation = graph.edge_attrs[EDGE_TYPE]
    for batch in batches:
        batch["x"] = flat_features(graph, batch["n_id"])
        batch["edge_type"] = [relation.index_select(0, pos) for pos in reversed(batch.pop("positions"))]
    return batches


def main(argv=None):
    args = parse_args(argv)
    args.fanouts = [int(f) for f in args.fanouts.split(",")]
    models = args.models.split(",")
    homogeneous = [m for m in models if m not in TYPED]
    graphs = {"synthetic": load_dataset("synthetic", root=args.data_root, scale=args.scale, seed=args.seed)
              if homogeneous else None,
              "typed": load_dataset("synthetic_mag", root=args.data_root, scale=args.typed_scale, seed=args.seed)
              if len(homogeneous) < len(models) else None}
    batches = {"synthetic": draw_batches(graphs["synthetic"], args) if homogeneous else None,
               "typed": draw_typed_batches(graphs["typed"], args) if graphs["typed"] is not None else None}
    graph = graphs["synthetic"] or graphs["typed"]
    out = Path(args.out) if args.out else (Path(__file__).resolve().parent / "results" /
                                           (f"train_step_cpu_s{args.scale:g}.json" if homogeneous else
                                            f"train_step_typed_cpu_s{args.typed_scale:g}.json"))
    meta = {"command": " ".join(["python -m benchmarks.train_step"] + (argv if argv is not None else sys.argv[1:])),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count(), "torch": torch.__version__,
            "scale": args.scale, "nodes": graph.num_nodes, "edges": graph.num_edges, "fanouts": args.fanouts,
            "batch_size": args.batch_size, "hidden": args.hidden, "batches": args.batches, "rounds": args.rounds,
            "edges_per_batch": {name: statistics.mean(b["edges"] for b in batches[name])
                                for name in batches if batches[name] is not None},
            "typed_graph": None if graphs["typed"] is None else repr(graphs["typed"]), "typed_scale": args.typed_scale}
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        for kind in models:
            name = "typed" if kind in TYPED else "synthetic"
            rows.append(measure(kind, graphs[name], batches[name], args, threads))
            r = rows[-1]
            print(f"{kind:5s} threads {threads}: conveyor {r['conveyor_ms']:.0f} ms, stock layers {r['stock_ms']:.0f} "
                  f"ms a step: {r['ratio']:.2f}x, CPU time {r['cpu_ratio']:.2f}x (load {r['load_1min']:.1f})",
                  flush=True)
    meta["load_1min_at_end"] = os.getloadavg()[0]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    out.with_suffix(".md").write_text(markdown(meta, rows))
    print(f"wrote {out} and {out.with_suffix('.md')}")


def markdown(meta: dict, rows: list) -> str:
    typed_only = all(r["model"] in TYPED for r in rows)
    title = (f"typed models against PyG's layers, synthetic_mag scale {meta['typed_scale']:g}" if typed_only else
             f"built-in models against PyG's stock layers, synthetic scale {meta['scale']:g}")
    lines = [f"# CPU training step: {title}", "",
             f"`{meta['command']}`", "",
             f"{meta['nodes']:,} nodes, {meta['edges']:,} edges; fanouts {meta['fanouts']}, {meta['batch_size']} seeds "
             "(sampled edges a batch: " + ", ".join(f"{name} {value:,.0f}" for name, value in
                                                     meta["edges_per_batch"].items()) + f"), hidden {meta['hidden']}; "
             f"{meta['cpu_count']} CPU cores, torch {meta['torch']}. A step: forward, cross-entropy, backward, Adam, "
             f"on the same {meta['batches']} batches for both, the same initial weights and outputs; median of "
             f"{meta['rounds']} alternating rounds (range in brackets); the ratio is the median of the rounds' "
             "ratios, by the wall clock and by this process's CPU time (load: the 1-minute load average at "
             "the row's start and end; on 2 cores shared with other work the wall clock also counts their "
             "turns). Both sides take conveyor's dropout masks (the built-ins' default, model.fast_dropout). "
             + (f"Typed rows (hetero-sage, rgcn) on {meta['typed_graph']}: the same model with PyG's sums "
                "(each relation's SAGEConv forward summed as to_hetero sums them, R-GCN's scatter means) as "
                "the stock one. No typed GCN row: PyG's to_hetero(GCN) refuses GCNConv on a typed graph "
                "(with self-loops on any relation, and without them GCNConv takes no bipartite inputs); "
                "R-GCN is the typed graph's GCN-like model. "
                if meta.get("typed_graph") else "")
             + ("" if typed_only else "Stock layers: PyG's GraphSAGE/GCN hop by hop (PerHopGNN), each layer PyG's own "
                "forward."), "",
             "| model | threads | load | conveyor ms/step | stock layers ms/step | conveyor / stock | CPU time ratio |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        load = f"{r['load_1min']:.1f}" + (f"-{r['load_1min_at_end']:.1f}" if "load_1min_at_end" in r else "")
        lines.append(f"| {r['model']} | {r['threads']} | {load} | {r['conveyor_ms']:.0f} "
                     f"({r['conveyor_range'][0]:.0f}-{r['conveyor_range'][1]:.0f}) | {r['stock_ms']:.0f} "
                     f"({r['stock_range'][0]:.0f}-{r['stock_range'][1]:.0f}) | **{r['ratio']:.2f}x** | "
                     f"{r['cpu_ratio']:.2f}x |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
