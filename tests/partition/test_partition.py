"""Self-reliant partitions: ownership, balance, exact L-hop neighbourhoods, sampling, storage."""
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.assignment import rebalance
from conveyor.partition.partitioner import format_report, load_or_partition, partition_graph, partition_report
from conveyor.partition.store import load_part, load_parts, save_parts
from conveyor.samplers import build_sampler
from tests.helpers import power_law_graph, random_graph, with_isolated

METHODS = ("pagraph", "random", "metis")


def with_splits(graph: Graph, train=0.3, val=0.1, test=0.2, features=6, seed=0) -> Graph:
    """Random disjoint train/val/test splits, features and labels."""
    g = torch.Generator().manual_seed(seed)
    n = graph.num_nodes
    perm = torch.randperm(n, generator=g)
    a, b, c = int(train * n), int((train + val) * n), int((train + val + test) * n)
    graph.train_idx, graph.val_idx, graph.test_idx = (perm[:a].sort().values, perm[a:b].sort().values,
                                                      perm[b:c].sort().values)
    graph.x = torch.randn(n, features, generator=g)
    graph.y = torch.randint(0, 5, (n,), generator=g)
    graph.num_classes = 5
    return graph


def graphs():
    return {"random": with_splits(random_graph(300, 2400, seed=3)),
            "power_law": with_splits(with_isolated(power_law_graph(400, 8000, seed=4), 15), seed=1)}


GRAPHS = graphs()


def hop_matrix(indptr: torch.Tensor, indices: torch.Tensor, num_hops: int) -> torch.Tensor:
    """dist[v, u] = hops from u to v along edges, i.e. u in IN_h(v) (num_hops + 1 when farther)."""
    n = indptr.numel() - 1
    adj = sp.csr_matrix((np.ones(indices.numel()), indices.numpy(), indptr.numpy()), shape=(n, n))
    dist = np.full((n, n), num_hops + 1, dtype=np.int8)
    reach = sp.identity(n, format="csr")
    dist[reach.toarray() > 0] = 0
    for hop in range(1, num_hops + 1):
        reach = ((reach + reach @ adj) > 0).astype(np.float64)  # row v: nodes within hop of v
        dist[(reach.toarray() > 0) & (dist > hop)] = hop
    return torch.from_numpy(dist)


def neighbourhood(indptr, indices, dist_row, num_hops):
    """(nodes within L hops, in-edges of nodes within L - 1 hops) as sets of ids."""
    nodes = set((dist_row <= num_hops).nonzero().flatten().tolist())
    edges = set()
    for w in (dist_row < num_hops).nonzero().flatten().tolist():
        edges.update((u, w) for u in indices[indptr[w]:indptr[w + 1]].tolist())
    return nodes, edges


def owned(parts, split):
    return [p.node_ids[getattr(p.graph, f"{split}_idx")] for p in parts]


def check_parts(graph: Graph, parts, num_parts: int, num_hops: int, sample: int = 25) -> None:
    assert len(parts) == num_parts and [p.rank for p in parts] == list(range(num_parts))
    # Training nodes: disjoint, covering, counts within one of each other.
    train = owned(parts, "train")
    assert torch.equal(torch.cat(train).sort().values, graph.train_idx.sort().values)
    counts = [t.numel() for t in train]
    assert max(counts) - min(counts) <= 1, counts
    # Validation and test nodes: each owned exactly once, also balanced.
    for split in ("val", "test"):
        ids = owned(parts, split)
        assert torch.equal(torch.cat(ids).sort().values, getattr(graph, f"{split}_idx").sort().values)
        sizes = [t.numel() for t in ids]
        assert max(sizes) - min(sizes) <= 1, (split, sizes)
    dist = hop_matrix(graph.indptr, graph.indices, num_hops)
    for part in parts:
        local = part.graph
        local.validate()
        ids = part.node_ids
        assert torch.equal(ids, torch.unique(ids)), "node_ids must be ascending and unique"
        assert torch.equal(local.x, graph.x[ids]) and torch.equal(local.y, graph.y[ids])
        assert local.num_classes == graph.num_classes
        # The precise rule: the nodes within L hops of the owned ones; full in-edge lists for
        # those within L - 1 hops, none for the others (exactly L hops away).
        mine = torch.cat([ids[local.train_idx], ids[local.val_idx], ids[local.test_idx]])
        closest = dist[mine].min(0).values  # hops from the owned set to each node
        assert torch.equal((closest <= num_hops).nonzero().flatten(), ids)
        global_deg = graph.in_degree()[ids]
        assert torch.equal(local.in_degree(), torch.where(closest[ids] < num_hops, global_deg, 0))
        # ... and each kept list is the global list, mapped through node_ids, in the same order.
        starts = torch.repeat_interleave(graph.indptr[ids] - local.indptr[:-1], local.in_degree())
        positions = torch.arange(local.num_edges) + starts
        assert torch.equal(ids[local.indices.long()], graph.indices[positions].long())
        # Owned nodes' L-hop in-neighbourhoods (nodes and edges) as sets, on a sample of them.
        local_dist = hop_matrix(local.indptr, local.indices, num_hops)
        mine_local = torch.cat([local.train_idx, local.val_idx, local.test_idx])
        for v_local in mine_local[torch.randperm(mine_local.numel())[:sample]].tolist():
            v = int(ids[v_local])
            want = neighbourhood(graph.indptr, graph.indices, dist[v], num_hops)
            nodes, edges = neighbourhood(local.indptr, local.indices, local_dist[v_local], num_hops)
            assert {int(ids[u]) for u in nodes} == want[0]
            assert {(int(ids[u]), int(ids[w])) for u, w in edges} == want[1]
        # The cache's order: local out-degree, descending, ties by id.
        out = torch.bincount(local.indices.long(), minlength=ids.numel())
        assert torch.equal(part.degree_ranking, torch.sort(out, descending=True, stable=True).indices)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("num_parts,num_hops", [(3, 2), (4, 1), (2, 3)])
def test_parts_are_self_reliant_and_balanced(method, name, num_parts, num_hops):
    graph = GRAPHS[name]
    parts = partition_graph(graph, num_parts, num_hops, method=method, seed=5)
    check_parts(graph, parts, num_parts, num_hops)


@pytest.mark.parametrize("method", METHODS)
def test_sampling_a_part_gives_the_full_graph_batch(method):
    """Local lists keep the global order and degrees, so bsp draws the same batch."""
    graph = GRAPHS["power_law"]
    fanouts = [4, 3, 2]
    parts = partition_graph(graph, 3, len(fanouts), method=method, seed=2)
    for part in parts:
        seeds_local = part.graph.train_idx[torch.randperm(part.graph.train_idx.numel(),
                                                          generator=torch.Generator().manual_seed(0))]
        for s, batch_seeds in enumerate(seeds_local.split(7)):
            local = build_sampler("bsp", part.graph, fanouts, seed=s).sample(batch_seeds)
            full = build_sampler("bsp", graph, fanouts, seed=s).sample(part.node_ids[batch_seeds])
            assert torch.equal(part.node_ids[local.n_id], full.n_id)
            assert torch.equal(local.num_nodes_per_hop, full.num_nodes_per_hop)
            for a, b in zip(local.edge_index_per_hop, full.edge_index_per_hop):
                assert torch.equal(a, b)


def test_fewer_hops_sampled_than_partitioned_also_match():
    graph = GRAPHS["random"]
    part = partition_graph(graph, 2, 3, method="pagraph")[1]
    seeds = part.graph.train_idx[:20]
    local = build_sampler("bsp", part.graph, [5, 5], seed=9).sample(seeds)
    full = build_sampler("bsp", graph, [5, 5], seed=9).sample(part.node_ids[seeds])
    assert torch.equal(part.node_ids[local.n_id], full.n_id)


def test_cora(cora):
    check_parts(cora, partition_graph(cora, 4, 2, method="pagraph"), 4, 2)


def two_communities(size=120, degree=8, seed=0) -> Graph:
    """Two dense random clusters with no edge between them; 40% of nodes train."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(0, size, (size * degree,), generator=g)
    dst = torch.randint(0, size, (size * degree,), generator=g)
    edges = torch.cat([torch.stack([src, dst]), torch.stack([src, dst]) + size], 1)
    graph = Graph.from_edge_index(torch.cat([edges, edges.flip(0)], 1), 2 * size)
    return with_splits(graph, train=0.4, val=0.1, test=0.1, seed=seed)


def misplaced(parts, size):
    """Training nodes outside their part's majority cluster (clusters: ids < size and >= size)."""
    return sum(min(int((t < size).sum()), int((t >= size).sum())) for t in owned(parts, "train"))


def test_pagraph_keeps_communities_together():
    """The score sends a node where its neighbourhood's training nodes already are: on two
    disconnected clusters and 2 parts, with L = 2 each part holds one cluster's training nodes
    except those the balance forces over; random assignment mixes about half."""
    graph = two_communities()
    size = graph.num_nodes // 2
    in_a = int((graph.train_idx < size).sum())
    forced = abs(in_a - (graph.train_idx.numel() - in_a)) // 2
    pagraph = partition_graph(graph, 2, 2, method="pagraph", splits=("train",))
    rand = partition_graph(graph, 2, 2, method="random", splits=("train",))
    assert misplaced(pagraph, size) == forced
    assert misplaced(rand, size) >= 0.3 * graph.train_idx.numel()
    replication = [partition_report(p)["train_replication"] for p in (pagraph, rand)]
    assert replication[0] < replication[1] - 0.2, replication


def test_pagraph_one_hop_beats_random_on_communities():
    """At L = 1 early nodes often see no assigned neighbour and go by |PV| (the paper's rule), so
    the split is noisier; still, over a few seeds, far fewer nodes are misplaced than at random."""
    graph = two_communities()
    size = graph.num_nodes // 2
    runs = {m: [misplaced(partition_graph(graph, 2, 1, method=m, seed=s, splits=("train",)), size)
                for s in range(3)] for m in ("pagraph", "random")}
    assert sum(runs["pagraph"]) < 0.8 * sum(runs["random"]), runs


def test_training_only_splits_leave_eval_empty():
    graph = GRAPHS["random"]
    parts = partition_graph(graph, 2, 2, splits=("train", "val"))
    assert all(p.graph.test_idx.numel() == 0 for p in parts)
    assert sum(p.graph.val_idx.numel() for p in parts) == graph.val_idx.numel()


def test_rebalance_moves_fewest_nodes():
    owner = torch.tensor([0] * 10 + [1] * 3 + [2] * 2)
    new = rebalance(owner, 3, torch.Generator().manual_seed(0))
    assert torch.bincount(new, minlength=3).tolist() == [5, 5, 5]
    assert int((new != owner).sum()) == 5 and bool((new[10:] == owner[10:]).all())


def test_report_and_table():
    graph = GRAPHS["random"]
    parts = partition_graph(graph, 3, 2, method="random")
    report = partition_report(parts)
    assert report["num_parts"] == 3 and len(report["parts"]) == 3
    assert report["replication_factor"] == pytest.approx(
        sum(p.node_ids.numel() for p in parts) / graph.num_nodes)
    assert [r["train"] for r in report["parts"]] == [p.graph.train_idx.numel() for p in parts]
    assert 1.0 <= report["replication_factor"] <= 3.0
    table = format_report(report)
    assert "replication factor" in table and len(table.splitlines()) == 2 + 3 + 2


def mapped_from(tensor: torch.Tensor, path: Path) -> bool:
    """True when the tensor's memory lies in a mapping of `path` (Linux /proc/self/maps)."""
    ptr = tensor.untyped_storage().data_ptr()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and fields[-1] == str(path):
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            if lo <= ptr < hi:
                return True
    return False


def test_save_load_round_trip(tmp_path):
    graph = GRAPHS["power_law"]
    parts = partition_graph(graph, 3, 2, method="pagraph")
    save_parts(parts, tmp_path / "p")
    loaded = load_parts(tmp_path / "p")
    for a, b in zip(parts, loaded):
        assert a.info == b.info
        assert torch.equal(a.node_ids, b.node_ids) and torch.equal(a.degree_ranking, b.degree_ranking)
        for name in ("indptr", "indices", "x", "y", "train_idx", "val_idx", "test_idx"):
            assert torch.equal(getattr(a.graph, name), getattr(b.graph, name)), name
    one = load_part(tmp_path / "p", 2)
    assert torch.equal(one.node_ids, parts[2].node_ids)
    assert mapped_from(one.node_ids, (tmp_path / "p" / "part2" / "node_ids.pt").resolve())
    assert mapped_from(one.graph.indices, (tmp_path / "p" / "part2" / "graph.pt").resolve())
    header = json.loads((tmp_path / "p" / "partition.json").read_text())
    assert header["num_parts"] == 3 and len(header["parts"]) == 3
    with pytest.raises(ConveyorError, match="rank 3"):
        load_part(tmp_path / "p", 3)
    with pytest.raises(ConveyorError, match="no complete partitioning"):
        load_part(tmp_path / "missing", 0)


def test_load_or_partition_reuses_matching_parts(tmp_path):
    graph = GRAPHS["random"]
    where = tmp_path / "parts"
    first = load_or_partition(graph, 2, 2, "pagraph", where)
    stamp = (where / "partition.json").stat().st_mtime_ns
    again = load_or_partition(graph, 2, 2, "pagraph", where)
    assert (where / "partition.json").stat().st_mtime_ns == stamp  # reused, not rewritten
    assert all(torch.equal(a.node_ids, b.node_ids) for a, b in zip(first, again))
    # Any change of settings or graph partitions again.
    third = load_or_partition(graph, 3, 2, "pagraph", where)
    assert len(third) == 3 and json.loads((where / "partition.json").read_text())["num_parts"] == 3
    changed = with_splits(random_graph(300, 2400, seed=3), seed=7)  # same edges, other split
    fourth = load_or_partition(changed, 3, 2, "pagraph", where)
    check_parts(changed, fourth, 3, 2)
    assert not (tmp_path / "parts" / "part3").exists()


def test_partition_folder_refuses_a_foreign_directory(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(ConveyorError, match="not a partition folder"):
        load_or_partition(GRAPHS["random"], 2, 1, "random", tmp_path)
    assert (tmp_path / "mine.txt").exists()


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_parts=0), "num_parts"),
    (dict(num_parts=10_000), "cannot split"),
    (dict(method="kmeans"), "unknown partition method"),
    (dict(num_hops=0), "num_hops"),
    (dict(num_hops=1.5), "num_hops"),
    (dict(splits=("val",)), "splits"),
])
def test_bad_input(kwargs, match):
    args = dict(graph=GRAPHS["random"], num_parts=2, num_hops=2, method="pagraph") | kwargs
    with pytest.raises(ConveyorError, match=match):
        partition_graph(**args)


def test_metis_without_pymetis_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # what `import pymetis` meets when absent
    with pytest.raises(ConveyorError, match="pip install pymetis"):
        partition_graph(GRAPHS["random"], 2, 1, method="metis")


def test_graph_without_training_nodes():
    graph = random_graph(50, 200)
    with pytest.raises(ConveyorError, match="no training nodes"):
        partition_graph(graph, 2, 2)


def test_command_line_writes_then_the_run_reuses(data_root, synthetic_small, tmp_path, capsys):
    """`conveyor partition` takes the run's own overrides and writes where a run with
    run.world_size=K looks, so that run finds the parts and does not partition again."""
    from conveyor.partition.configured import make_partitions
    from conveyor.partition_command import main, settings_of

    overrides = ["data=synthetic", "data.scale=0.002", f"data.root={data_root}",
                 "sampler.fanouts=[5,5]", "partition=random", f"partition.dir={tmp_path / 'parts'}"]
    assert main(["num_parts=3", *overrides]) == 0
    printed = capsys.readouterr().out
    assert "replication factor" in printed and "wrote 3 parts" in printed
    parts = load_parts(tmp_path / "parts")
    assert [p.info["num_hops"] for p in parts] == [2, 2, 2] and parts[0].info["method"] == "random"
    counts = [p.graph.train_idx.numel() for p in parts]
    assert sum(counts) == synthetic_small.train_idx.numel() and max(counts) - min(counts) <= 1
    assert torch.equal(parts[1].graph.x, synthetic_small.x[parts[1].node_ids])
    stamp = (tmp_path / "parts" / "partition.json").stat().st_mtime_ns
    assert main(["num_parts=3", *overrides]) == 0 and "reused" in capsys.readouterr().out
    settings = settings_of(["run.world_size=3", *overrides])
    directory, _, reused = make_partitions(settings.data, settings.partition, len(settings.sampler.fanouts), 3)
    assert directory == tmp_path / "parts" and reused
    assert (tmp_path / "parts" / "partition.json").stat().st_mtime_ns == stamp  # found, not redone
    with pytest.raises(ConveyorError, match="missing num_parts"):
        main(["data=synthetic"])
    with pytest.raises(ConveyorError, match="num_parts must be"):
        main(["num_parts=two"])
    with pytest.raises(ConveyorError, match="bad argument"):
        main(["num_parts=2", "data=imagenet"])


def folder(overrides: list, world_size: int) -> Path:
    """Where a run with these overrides keeps its partitions for `world_size` ranks."""
    from conveyor.partition.configured import partition_dir
    from conveyor.partition_command import settings_of

    settings = settings_of(overrides)
    return partition_dir(settings.data, settings.partition, len(settings.sampler.fanouts), world_size)


def test_default_folder_depends_on_everything_that_changes_the_parts(data_root):
    base = ["data=synthetic", f"data.root={data_root}"]
    folders = {folder(base + extra, k) for extra, k in [
        ([], 2), ([], 4), (["data.scale=0.5"], 2), (["partition=metis"], 2),
        (["sampler.fanouts=[5,5]"], 2)]}
    assert len(folders) == 5
    assert all(f.parent == Path(data_root) / "partitions" for f in folders)


def test_a_custom_datasets_folder_is_one_folder_named_after_its_path(tmp_path):
    folders = [folder(["data=custom", f"data.root={tmp_path}", f"data.path={path}"], 2)
               for path in ("/data/a/graph", "/data/b/graph", "/data/a/graph")]
    assert all(f.parent == tmp_path / "partitions" for f in folders)  # one level, no nesting
    assert folders[0].name.startswith("custom_pathgraph-") and folders[0] == folders[2] != folders[1]
