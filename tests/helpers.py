"""What the test modules share: the run settings for tests (`make_config`), small graphs, a
sampler's statistics, planted payloads, and the runners and models several test modules use. One
module, so that no test module imports another."""
from __future__ import annotations

import ast
import json
import os
import pickle
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
import psutil
import pytest
import torch
from torch import nn
from torch_geometric.nn import GraphSAGE

from conveyor.config import load_settings
from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.samplers import SampledBatch
from conveyor.trainer.run import train

REPO = Path(__file__).resolve().parent.parent


def home_with_planetoid(home: Path, monkeypatch, data_root: Path) -> None:
    """HOME at `home`, whose ~/.cache/conveyor/data (where `conveyor prepare planetoid` writes,
    and the README's examples read) is the prepared `data_root`."""
    monkeypatch.setenv("HOME", str(home))
    (home / ".cache" / "conveyor").mkdir(parents=True, exist_ok=True)
    (home / ".cache" / "conveyor" / "data").symlink_to(data_root)


def make_config(*overrides: str):
    """The `Settings` of a run with these overrides (checked: bad input raises its ConveyorError)."""
    return load_settings(["trainer.progress=false", "run.device=cpu", *overrides])


def random_graph(num_nodes=300, num_edges=3000, seed=0) -> Graph:
    g = torch.Generator().manual_seed(seed)
    return Graph.from_edge_index(torch.randint(0, num_nodes, (2, num_edges), generator=g), num_nodes)


def power_law_graph(num_nodes=400, num_edges=6000, exponent=1.2, seed=0) -> Graph:
    """Sources and destinations drawn with Zipf-like weights: a few hubs, many leaves."""
    g = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, num_nodes + 1, dtype=torch.float64) ** exponent
    src = torch.multinomial(weights, num_edges, replacement=True, generator=g)
    dst = torch.multinomial(weights.flip(0), num_edges, replacement=True, generator=g)
    return Graph.from_edge_index(torch.stack([src, dst]), num_nodes)


def star_graph(leaves=200) -> Graph:
    """Node 0 is a hub pointing to and from every leaf."""
    leaf = torch.arange(1, leaves + 1)
    hub = torch.zeros_like(leaf)
    return Graph.from_edge_index(torch.stack([torch.cat([leaf, hub]), torch.cat([hub, leaf])]), leaves + 1)


def chain_graph(n=50) -> Graph:
    """i -> i+1: every node has in-degree 1 except node 0 (in-degree 0)."""
    return Graph.from_edge_index(torch.stack([torch.arange(n - 1), torch.arange(1, n)]), n)


def with_isolated(graph: Graph, extra=20) -> Graph:
    """The same edges plus `extra` nodes with no edge at all."""
    return Graph.from_edge_index(graph.edge_index(), graph.num_nodes + extra)


def complete_in_graph(degree=20, copies=1) -> Graph:
    """`copies` disjoint fans: centre c * (degree + 1) has exactly the `degree` in-neighbours that
    follow it, which have none. Sampling all centres at once gives `copies` independent draws."""
    centre = torch.arange(copies).repeat_interleave(degree) * (degree + 1)
    rank = torch.arange(degree).repeat(copies)
    return Graph.from_edge_index(torch.stack([centre + 1 + rank, centre]), copies * (degree + 1))


def write_custom_dataset(directory, num_nodes=50, **splits):
    """A random graph as the custom dataset's arrays (edge_index, x, y, and the given splits)."""
    import numpy as np
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(directory / "edge_index.npy", rng.integers(0, num_nodes, (2, 4 * num_nodes)))
    np.save(directory / "x.npy", rng.normal(size=(num_nodes, 4)).astype(np.float32))
    np.save(directory / "y.npy", rng.integers(0, 3, num_nodes))
    for name, ids in splits.items():
        np.save(directory / f"{name}.npy", np.asarray(ids, dtype=np.int64))
    return directory


class Payload:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")  # runs on unpickling: creates the marker


def plant(path: Path, marker: Path, as_torch_file: bool = True) -> Path:
    """Write the payload to `path`: inside a torch zip file (as `torch.save` writes one), or as a
    bare pickle (as the Planetoid raw files are)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if as_torch_file:
        torch.save({"model": Payload(marker)}, path)
    else:
        path.write_bytes(pickle.dumps(Payload(marker)))
    return path


def neighbour_counts(sample_fn, graph: Graph, node: int, fanout: int, draws: int) -> torch.Tensor:
    """How often each in-neighbour of `node` is drawn at hop 1 over `draws` independent batches."""
    nbrs = graph.indices[graph.indptr[node]: graph.indptr[node + 1]].long()
    counts = torch.zeros(graph.num_nodes, dtype=torch.long)
    for _ in range(draws):
        batch = sample_fn(torch.tensor([node]))
        src = batch.edge_index_per_hop[0][0].cpu().long()
        counts.index_add_(0, batch.n_id.cpu().long()[src], torch.ones_like(src))
    return counts[nbrs]


def fan_rank_counts(batch: SampledBatch, degree: int, hop: int = 1) -> torch.Tensor:
    """On `complete_in_graph(degree, copies)`: how often each neighbour rank (0..degree-1) was drawn
    at `hop` by the fan centres, summed over the copies."""
    n_id = batch.n_id.cpu().long()
    src, dst = batch.edge_index_per_hop[hop - 1].cpu().long()
    centre = n_id[dst]
    keep = centre % (degree + 1) == 0
    rank = n_id[src[keep]] - centre[keep] - 1
    return torch.bincount(rank, minlength=degree)


BAD_SEEDS = [
    (torch.tensor([1, 2, 2]), "unique"),
    (torch.tensor([1, 400]), "0..299"),
    (torch.tensor([-1, 2]), "0..299"),
    (torch.tensor([[1, 2]]), "1-D"),
    (torch.tensor([1.0, 2.0]), "integer"),
]


def fused_state_is_clean(sampler) -> bool:
    """After a fused launch no node carries a mark and the task queue is empty: the next launch
    starts clean."""
    from conveyor.samplers import fused_kernel  # only once the test module has chosen the interpreter or not
    return bool((sampler._buf["state"] == fused_kernel.EMPTY.value).all() and (sampler._buf["queue"] == -1).all())


def multigraph(num_nodes=40, num_edges=600, seed=0, zero_weights=0.2) -> Graph:
    """A random graph that keeps its parallel edges (dedup=False, as conveyor.NeighborLoader builds
    PyG's graphs): ~600 edges over 1600 node pairs, so many pairs are joined more than once. Its
    edges carry "w", random weights of which about `zero_weights` are 0."""
    g = torch.Generator().manual_seed(seed)
    graph = Graph.from_edge_index(torch.randint(0, num_nodes, (2, num_edges), generator=g), num_nodes, dedup=False)
    weights = torch.rand(num_edges, generator=g)
    graph.edge_attrs["w"] = torch.where(torch.rand(num_edges, generator=g) < zero_weights, 0.0, weights)
    return graph


def assert_edge_positions(batch: SampledBatch, graph: Graph) -> None:
    """Each sampled edge's CSC position holds its neighbour (`graph.indices[pos] == n_id[src]`),
    lies in its target's CSC row, and no edge is drawn twice (parallel edges are separate edges)."""
    assert batch.edge_pos_per_hop is not None and len(batch.edge_pos_per_hop) == batch.num_hops
    for (src, dst), pos in zip(batch.edge_index_per_hop, batch.edge_pos_per_hop, strict=True):
        src, dst, pos = src.cpu(), dst.cpu(), pos.cpu()
        assert pos.dtype == torch.long and pos.shape == src.shape
        assert torch.equal(graph.indices[pos].long(), batch.n_id.cpu()[src])
        target = batch.n_id.cpu()[dst]
        assert bool(((graph.indptr[target] <= pos) & (pos < graph.indptr[target + 1])).all())
        assert torch.unique(pos).numel() == pos.numel()


def weighted_fans(weights, copies=1) -> Graph:
    """`complete_in_graph(len(weights), copies)` whose edges carry "w": the neighbour of rank r of
    every fan weighs weights[r] (a centre's CSC row holds its neighbours in rank order)."""
    graph = complete_in_graph(len(weights), copies)
    graph.edge_attrs["w"] = torch.tensor(weights, dtype=torch.float64).repeat(copies)
    return graph


def drawn_subsets(batches, ranks: int, hops=(1,)) -> torch.Tensor:
    """On `weighted_fans`: how often each set of neighbour ranks (as a bit mask, rank r = bit r)
    was what a fan centre drew at one of `hops`, over the batches: [2**ranks] counts. Only ranks
    below `ranks` may be drawn (an AssertionError otherwise)."""
    counts = torch.zeros(2**ranks, dtype=torch.long)
    for batch in batches:
        n_id = batch.n_id.cpu().long()
        for hop in hops:
            src, dst = batch.edge_index_per_hop[hop - 1].cpu().long()
            centre, rank = n_id[dst], n_id[src] - n_id[dst] - 1
            assert not rank.numel() or int(rank.max()) < ranks, f"rank {int(rank.max())} drawn"
            mask = torch.zeros(n_id.max() + 1, dtype=torch.long).index_add_(0, centre, 2**rank)
            counts += torch.bincount(mask[centre.unique()], minlength=2**ranks)
    return counts


def successive_sampling(weights, k: int) -> torch.Tensor:
    """The exact probability of each set of k ranks (bit masks, as `drawn_subsets`) under PyG's
    weighted draw without replacement: each pick in proportion to the weight among those left,
    uniformly among the zero-weight ones once no positive weight is left. By enumeration."""
    probabilities = torch.zeros(2 ** len(weights), dtype=torch.float64)

    def walk(mask: int, probability: float, left: int) -> None:
        if left == 0:
            probabilities[mask] += probability
            return
        rest = [i for i in range(len(weights)) if not mask >> i & 1]
        total = sum(weights[i] for i in rest)
        for i in rest:
            share = weights[i] / total if total > 0 else 1 / len(rest)
            if share:
                walk(mask | 1 << i, probability * share, left - 1)

    walk(0, 1.0, k)
    return probabilities


def assert_drawn_as(counts: torch.Tensor, probabilities: torch.Tensor) -> None:
    """Observed subset counts against exact probabilities: never a subset of probability 0 (a
    zero weight drawn while positive ones were left), and a chi-square fit (fixed seeds: the
    verdict repeats) with p > 1e-3."""
    from scipy import stats
    possible = probabilities > 0
    assert int(counts[~possible].sum()) == 0, counts.nonzero().squeeze(1).tolist()
    if int(possible.sum()) == 1:  # one possible set (every neighbour taken): nothing to fit
        return
    expected = probabilities[possible] * counts.sum() / probabilities[possible].sum()
    p = stats.chisquare(counts[possible].double().numpy(), expected.numpy()).pvalue
    assert p > 1e-3, (counts[possible].tolist(), expected.tolist(), p)


WEIGHTED_CASES = [  # (the weights of a fan's neighbours by rank, the fanout), for `weighted_fans`
    pytest.param([1.0, 2.0, 3.0, 0.0, 4.0, 10.0], 1, id="one pick in proportion to the weight"),
    pytest.param([1.0, 2.0, 3.0, 0.0, 4.0, 10.0], 3, id="three of six, a zero weight never drawn"),
    pytest.param([5.0, 0.0, 1.0, 0.0, 0.0], 4, id="zero weights fill the draw up, uniformly"),
    pytest.param([1e-300, 3e-300, 0.0], 1, id="tiny weights keep their ratio"),
    pytest.param([0.0, 1.0, 0.0], 3, id="a row no longer than the fanout is taken whole"),
]
BAD_WEIGHTS = [  # (the graph's edge attributes for E edges, words of the refusal of weight_attr="w")
    (lambda E: {}, "names no edge attribute"),
    (lambda E: {"w": torch.ones(5)}, "shape (5,)"),
    (lambda E: {"w": torch.ones(E, 1)}, ", 1)"),
    (lambda E: {"w": torch.ones(E, dtype=torch.bool)}, "not real numbers"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([7]), -1.0)}, "at edge 7"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([3]), float("nan"))}, "NaN"),
    (lambda E: {"w": torch.ones(E).index_fill_(0, torch.tensor([3]), float("inf"))}, "infinite"),
]


def launch(*args, timeout=600, env=None):
    return subprocess.run([sys.executable, str(REPO / "launch.py"), "trainer.progress=false",
                           "run.device=cpu", *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def assert_clear_error(result, *words):
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("conveyor: error:"), result.stderr
    for word in words:
        assert word in message, (word, message)


def run(tmp_path, name, *overrides):
    cfg = make_config(f"run.out_dir={tmp_path / name}", *overrides)
    result = train(cfg)
    metrics = json.loads((tmp_path / name / "metrics.json").read_text())
    assert result.final == metrics["final"] and result.history == metrics["epochs"]
    return result.final, metrics


def refusal(*overrides) -> str:
    """The message a run with these overrides is refused with (composing or checking)."""
    with pytest.raises(ConveyorError) as error:
        make_config(*overrides)
    return str(error.value)


def write_custom(directory: Path, **arrays) -> Path:
    """Arrays as .npy, tensors as .pt."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in arrays.items():
        if isinstance(value, torch.Tensor):
            torch.save(value, directory / f"{name}.pt")
        else:
            np.save(directory / f"{name}.npy", value)
    return directory


def shm_names(pids) -> set[str]:
    """The /dev/shm files these processes have mapped (named semaphores, shared segments)."""
    names = set()
    for pid in pids:
        try:
            maps = Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
        names.update(line.split()[-1] for line in maps.splitlines()
                     if "/dev/shm/" in line and not line.endswith("(deleted)"))
    return names


def assert_gone(pids, timeout=5.0):
    procs = []
    for pid in pids:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    assert not alive, f"processes left behind: {alive}"


def train_both(tmp_path, *overrides):
    runs = {}
    for mode, extra in (("serial", []), ("async", ["pipeline.pace.interval=3"])):
        out = tmp_path / mode
        # every batch's loss, to compare them one by one; evaluation through the pipeline too
        train(make_config(f"pipeline={mode}", f"run.out_dir={out}", "trainer.log_every=1",
                          "trainer.inference=sampled", *extra, *overrides))
        losses, tags = tensorboard_losses(out)
        runs[mode] = (json.loads((out / "metrics.json").read_text()), losses, tags, out)
    return runs["serial"], runs["async"]


def tensorboard_losses(out_dir) -> list[float]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(out_dir))
    events.Reload()
    return [e.value for e in events.Scalars("batch/loss")], events.Tags()["scalars"]


def feature_graph(num_nodes=600, num_edges=6000, seed=0) -> Graph:
    g = torch.Generator().manual_seed(seed)
    weights = 1.0 / torch.arange(1, num_nodes + 1, dtype=torch.float64)  # a few hubs
    src = torch.multinomial(weights, num_edges, replacement=True, generator=g)
    dst = torch.randint(0, num_nodes, (num_edges,), generator=g)
    return Graph.from_edge_index(torch.stack([src, dst]), num_nodes,
                                 x=torch.randn(num_nodes, 12, generator=g),
                                 y=torch.randint(0, 4, (num_nodes,), generator=g),
                                 train_idx=torch.arange(0, num_nodes, 2), num_classes=4)


class OwnModel(nn.Module):
    """A user's model: `forward(x, layers)`, one Linear per layer over mean-aggregated neighbours."""

    def __init__(self, in_channels, out_channels, num_layers, hidden_channels=32, dropout=0.0):
        super().__init__()
        self.dropout = dropout
        dims = [in_channels] + [hidden_channels] * (num_layers - 1) + [out_channels]
        self.lins = nn.ModuleList(nn.Linear(2 * a, b) for a, b in zip(dims[:-1], dims[1:]))

    def forward(self, x, layers):
        for i, (lin, (edge_index, _num_src, num_dst)) in enumerate(zip(self.lins, layers)):
            src, dst = edge_index
            total = torch.zeros(num_dst, x.size(1)).index_add_(0, dst, x[src])
            mean = total / torch.bincount(dst, minlength=num_dst).clamp(min=1).unsqueeze(1)
            x = lin(torch.cat([x[:num_dst], mean], 1))
            if i < len(self.lins) - 1:
                x = nn.functional.dropout(x.relu(), self.dropout, self.training)
        return x


class OwnLayerwise(OwnModel):
    """The user's model of test_adapter, with the two names layer-wise inference needs."""

    @property
    def num_layers(self):
        return len(self.lins)

    def inference_per_layer(self, layer, x, edge_index, batch_size):
        src, dst = edge_index
        total = torch.zeros(batch_size, x.size(1)).index_add_(0, dst, x[src])
        mean = total / torch.bincount(dst, minlength=batch_size).clamp(min=1).unsqueeze(1)
        x = self.lins[layer](torch.cat([x[:batch_size], mean], 1))
        return x.relu() if layer < len(self.lins) - 1 else x


class EdgeIndexSAGE(nn.Module):
    """A user's own module written for PyG's loader: forward(x, edge_index)."""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.gnn = GraphSAGE(in_channels, 32, 2, out_channels, dropout=0.5)

    def forward(self, x, edge_index):
        return self.gnn(x, edge_index)


def skewed_graph(num_nodes=300, num_edges=3000, dim=16, dtype=torch.float32, seed=0) -> Graph:
    """Power-law-ish sources (low ids far more often), random features with a fixed seed."""
    gen = torch.Generator().manual_seed(seed)
    src = (torch.rand(num_edges, generator=gen) ** 3 * num_nodes).long()
    dst = torch.randint(0, num_nodes, (num_edges,), generator=gen)
    x = torch.randn(num_nodes, dim, generator=gen).to(dtype)
    return Graph.from_edge_index(torch.stack([src, dst]), num_nodes, x=x,
                                 train_idx=torch.arange(0, num_nodes, 3))


class DoubledFeatures:
    """Features of the user's own: every row twice `x`, gathered from host memory."""

    def __init__(self, x: torch.Tensor):
        self.rows = 2 * x
        self.feature_dim, self.dtype = x.size(1), x.dtype
        self.gathered = 0

    def gather(self, n_id: torch.Tensor, out=None) -> torch.Tensor:
        self.gathered += n_id.numel()
        return torch.index_select(self.rows, 0, n_id.cpu(), out=out)

    def stats(self) -> dict:
        return {"hits": 0, "misses": self.gathered, "bytes_from_host": self.gathered * self.feature_dim * 4}


SHADOWED = ("trainer", "cache", "pipeline", "samplers", "partition")


def users_project(folder):
    """A user's project folder: modules named like conveyor's stages and a conf/ of its own, each
    failing loudly if conveyor ever read it."""
    folder.mkdir(exist_ok=True)
    for name in SHADOWED:
        (folder / f"{name}.py").write_text(f"raise ImportError(\"the user's own {name}.py was imported\")\n")
    (folder / "conf").mkdir(exist_ok=True)
    (folder / "conf" / "config.yaml").write_text("defaults: [not_conveyors]\n")
    return folder


# -- PyG's own loader tests, with conveyor's loader ------------------------------------------------

PYG_TESTS = REPO / "tests" / "data" / "pyg"  # PyG's test files, verbatim (ORIGIN.md there)
SAMPLER_PACKAGES = {"pyg_lib", "pyg-lib", "torch_sparse", "torch-sparse"}
SAMPLER_FLAGS = ("WITH_PYG_LIB", "WITH_TORCH_SPARSE", "WITH_WEIGHTED_NEIGHBOR_SAMPLE", "WITH_EDGE_TIME_NEIGHBOR_SAMPLE")
PYG_LIB_SKIP = "'pyg-lib' does not support"  # the reason of PyG's skipif marks around pyg-lib-only features


def pyg_spec_tests(file: str, loaders: dict, pipeline: str, prefix: str) -> dict:
    """The test functions of PyG's own test file `file` (tests/data/pyg/), run with each loader of
    `loaders` (PyG's name -> conveyor's class) imported from conveyor instead of PyG: that import line
    is the one change to the file. PyG's gates on pyg-lib and torch_sparse are opened (conveyor needs
    neither): `withPackage` drops those two names, `onlyNeighborSampler` and the skipif marks built
    from the pyg-lib flags go, and the in-body flags are True in the module's namespace only (PyG's
    own sampler still reads the real ones). `pipeline` becomes the loaders' default pipeline. The
    functions come back under `prefix` + their name, for a test module's globals."""
    import types

    import torch_geometric.testing as pyg_testing
    import torch_geometric.testing.decorators as pyg_decorators

    source = (PYG_TESTS / file).read_text()
    for name in loaders:
        source = with_conveyors(source, name, file)
    module = types.ModuleType(f"pyg_spec_{pipeline}_{file[:-3]}")
    patches = {"withPackage": open_gate(pyg_decorators.withPackage), "onlyNeighborSampler": lambda f: f}
    saved = {m: {k: getattr(m, k) for k in patches} for m in (pyg_testing, pyg_decorators)}
    try:
        for m in saved:
            for k, v in patches.items():
                setattr(m, k, v)
        exec(compile(source, str(PYG_TESTS / file), "exec"), module.__dict__)
    finally:
        for m, values in saved.items():
            for k, v in values.items():
                setattr(m, k, v)
    module.__dict__.update({flag: True for flag in SAMPLER_FLAGS})
    module.__dict__.update({name: with_pipeline(cls, pipeline) for name, cls in loaders.items()})
    tests = {}
    for name, test in module.__dict__.items():
        if name.startswith("test_") and callable(test):
            test.pytestmark = [m for m in getattr(test, "pytestmark", [])
                               if not (m.name == "skipif" and PYG_LIB_SKIP in str(m.kwargs.get("reason", "")))]
            tests[prefix + name] = test
    return tests


def with_conveyors(source: str, name: str, file: str) -> str:
    """`source` importing `name` from conveyor instead of torch_geometric.loader: the import line
    replaced where it imports that name alone, else conveyor's import right after PyG's statement
    (which imports other names of torch_geometric.loader too), shadowing PyG's."""
    pyg_import = f"from torch_geometric.loader import {name}\n"
    if source.count(pyg_import) == 1:
        return source.replace(pyg_import, f"from conveyor import {name}\n")
    found = [node for node in ast.parse(source).body if isinstance(node, ast.ImportFrom)
             and node.module == "torch_geometric.loader" and any(a.name == name for a in node.names)]
    assert len(found) == 1, f"{file} no longer imports {name} from torch_geometric.loader as expected"
    lines = source.splitlines(keepends=True)
    lines.insert(found[0].end_lineno, f"from conveyor import {name}\n")
    return "".join(lines)


def open_gate(with_package):
    """PyG's withPackage without its checks for the samplers conveyor does not need."""
    def gate(*packages):
        rest = [p for p in packages if re.split(r"[<>=!~ ]", p, maxsplit=1)[0] not in SAMPLER_PACKAGES]
        return with_package(*rest) if rest else (lambda f: f)
    return gate


def pyg_get_dataset():
    """PyG's test/conftest.py `get_dataset` fixture's value, for the datasets PyG's tests here read
    (KarateClub: in the package, nothing downloaded)."""
    import functools

    def load_dataset(root: str, name: str, *args, **kwargs):
        assert "karate" in name.lower(), name
        from torch_geometric.datasets import KarateClub
        return KarateClub(*args, **kwargs)
    return functools.partial(load_dataset, "memory://pyg_test_datasets")


def with_pipeline(cls, pipeline: str):
    """`cls` under its own name, its `pipeline=` defaulting to `pipeline`."""
    return type(cls.__name__, (cls,), {"__init__": lambda self, *args, pipeline=pipeline, **kwargs:
                                       cls.__init__(self, *args, pipeline=pipeline, **kwargs)})


# -- a small /dev/shm (test_shm_small.py, test_hostile_doors.py) --------------------------------

SMALL_SHM = "8m"


def in_small_shm(command: str, size: str = SMALL_SHM, timeout: int = 180) -> subprocess.CompletedProcess:
    """`command` (a shell line, run in the repository) in a mount namespace of its own whose
    /dev/shm is a tmpfs of `size` (`unshare -m`, as root)."""
    prepare = f"mount -t tmpfs -o size={size} tmpfs /dev/shm"
    return subprocess.run(["unshare", "-m", "sh", "-c", f"{prepare} && {command}"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def shm_namespaces_allowed() -> bool:
    try:
        probe = in_small_shm("df -B1 --output=size /dev/shm | tail -1", timeout=20)
        return probe.stdout.strip() == str(8 << 20)
    except (OSError, subprocess.SubprocessError):
        return False


def fill_shm() -> None:
    """Fill /dev/shm to its last byte (inside such a namespace)."""
    with open("/dev/shm/filler", "wb") as filler:
        try:
            while True:
                filler.write(bytes(1 << 16))
                filler.flush()
        except OSError:
            pass


class NoFanouts:
    """bsp drawing every in-neighbour at two hops, without saying its fanouts: the pipeline cannot
    bound its batches ahead (a sampler of the user's own)."""

    def __init__(self, graph):
        from conveyor.samplers import build_sampler
        self.inner = build_sampler("bsp", graph, [-1, -1])

    def sample(self, seeds):
        return self.inner.sample(seeds)


# -- the hostile sweeps' harness (test_hostile_doors.py, test_hostile_round4.py) ----------------

@dataclass(frozen=True)
class Expect:
    words: tuple = ()  # a refusal: words its paragraph must hold
    check: Optional[Callable[[Any, Any], None]] = None  # a result: check(result, fixtures)

    @property
    def refuses(self) -> bool:
        return self.check is None


def refused(*words: str) -> Expect:
    return Expect(words=words)


def correct(check: Callable[[Any, Any], None] = lambda result, fx: None) -> Expect:
    return Expect(check=check)


@dataclass(frozen=True)
class Case:
    door: str
    name: str
    call: Callable[[Any], Any]  # call(fixtures)
    expect: Expect = field(default_factory=refused)

    @property
    def id(self) -> str:
        return f"{self.door}: {self.name}"


def run_case(case: Case, fx) -> None:
    """The harness: a paragraph where a refusal is expected, the checked result otherwise, and
    anything else (a traceback of another type, a refusal of a sound call) a failure."""
    try:
        result = case.call(fx)
    except ConveyorError as error:
        text = str(error)
        assert case.expect.refuses, f"{case.id} was refused although sound: {text}"
        assert text.strip() and "\n" not in text.strip() and "Traceback" not in text, text
        for word in case.expect.words:
            assert word in text, (word, text)
        return
    except Exception:  # noqa: BLE001 -- what the sweep looks for
        pytest.fail(f"{case.id}: a traceback instead of one paragraph:\n{traceback.format_exc()}")
    assert not case.expect.refuses, f"{case.id} was accepted: {type(result).__name__} (expected a refusal)"
    case.expect.check(result, fx)


# -- PyG's worker_init_fn in conveyor's stage processes (test_pyg_consumers.py) -------------------

def record_worker(folder: str, worker_id: int) -> None:
    """A worker_init_fn (partial over `folder`): where it ran, with how many torch threads."""
    (Path(folder) / f"{worker_id}").write_text(f"{os.getpid()} {torch.get_num_threads()}")
