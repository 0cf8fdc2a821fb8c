"""Small graphs for tests: random, power-law and adversarial shapes."""
import torch

from conveyor.partition import Graph


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
