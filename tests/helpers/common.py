"""The settings for tests (`make_config`), small graphs, planted payloads, and the models several test
modules use."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch_geometric.nn import GraphSAGE

from conveyor.config import load_settings
from conveyor.partition import Graph

REPO = Path(__file__).resolve().parents[2]


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


# -- PyG's worker_init_fn in conveyor's stage processes (test_pyg_consumers.py) -------------------

def record_worker(folder: str, worker_id: int) -> None:
    """A worker_init_fn (partial over `folder`): where it ran, with how many torch threads."""
    (Path(folder) / f"{worker_id}").write_text(f"{os.getpid()} {torch.get_num_threads()}")


def memory_cgroup(limit: int) -> Path | None:
    """A child memory cgroup (v1) of `limit` bytes under this process's own, or None where root may
    not make one. The caller moves a process in (its `cgroup.procs`) and removes the folder after."""
    try:
        own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
                   if ":memory:" in line)
        folder = Path("/sys/fs/cgroup/memory") / own.lstrip("/") / f"conveyor-test-{os.getpid()}"
        folder.mkdir()
        (folder / "memory.limit_in_bytes").write_text(str(limit))
        return folder
    except (OSError, StopIteration):
        return None
