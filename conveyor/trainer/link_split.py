"""The link task's edges split into training, validation and test links, by PyG's own
`RandomLinkSplit` (the same split a PyG user makes, and the comparison's reference trains on).

For an undirected graph (every edge's reverse is in it) each undirected edge is one link, in one
split, and its two directions go together into the message-passing graphs; a directed graph's
edges are links one by one. No leakage: training's graph (which the training batches are sampled
from, and validation's embeddings are computed on) holds the training edges only; the test's holds
the training and validation edges, as RandomLinkSplit's test data does. Validation and test links
come with as many negatives (pairs that are no edge of the graph), labelled 0; training's
negatives are drawn per batch instead (the sampler stage's, samplers/link.py).

The split is a function of the graph and the seed alone (PyG draws it from torch's and Python's
global generators, seeded here and restored after), so every DDP rank and a resumed run make the
same one.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.partition import Graph


@dataclass
class LinkSplit:
    train_graph: Graph  # the training edges: training's message passing, and validation's
    test_graph: Graph  # the training and validation edges: the test's message passing
    train_links: Tensor  # [2, P] the training links (positives; negatives are drawn per batch)
    val_links: Tensor  # [2, V] validation links, positives then negatives
    val_labels: Tensor  # [V] float: 1 for a link, 0 for a negative
    test_links: Tensor
    test_labels: Tensor
    undirected: bool
    kind: str = ""  # how the links were split, where not at random (a typed graph's: typed_link_split.py)
    train_times: Optional[Tensor] = None  # [P] each training link's time: a temporal split's (drawn by time)

    def describe(self) -> str:
        kind = self.kind or ("undirected: an edge and its reverse are one link" if self.undirected else "directed")
        return (f"links {self.train_links.size(1)} train, {int(self.val_labels.sum())} val, "
                f"{int(self.test_labels.sum())} test (+ as many negatives each), {kind}")


def split_links(graph: Graph, val_ratio: float, test_ratio: float, seed: int) -> LinkSplit:
    """`graph`'s edges split by RandomLinkSplit(num_val=val_ratio, num_test=test_ratio), drawn from
    `seed` (module doc)."""
    from torch_geometric.data import Data
    from torch_geometric.transforms import RandomLinkSplit
    from torch_geometric.utils import is_undirected

    edge_index = graph.edge_index()
    data = Data(edge_index=edge_index, num_nodes=graph.num_nodes, **graph.edge_attrs)
    undirected = bool(is_undirected(edge_index, num_nodes=graph.num_nodes))
    split = RandomLinkSplit(num_val=val_ratio, num_test=test_ratio, is_undirected=undirected,
                            add_negative_train_samples=False)
    python_state = random.getstate()
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            random.seed(seed)
            train, val, test = split(data)
    except ValueError as error:  # too few edges for the split
        raise ConveyorError(f"task=link cannot split {graph!r}: {error}. Give it more edges, or lower "
                            f"task.val_ratio and task.test_ratio.")
    finally:
        random.setstate(python_state)
    for name, ratio, held in (("validation", val_ratio, val), ("test", test_ratio, test)):
        if int(held.edge_label.sum()) == 0:  # its AUC would be nan, silently
            key = "val_ratio" if name == "validation" else "test_ratio"
            raise ConveyorError(f"task=link: task.{key}={ratio:g} of {graph!r}'s edges leaves no {name} link, "
                                f"so the run would have no {name} figure (AUC nan). Raise task.{key} (e.g. 0.05 "
                                f"or 0.1), or give the graph more edges.")
    return LinkSplit(message_graph(graph, train), message_graph(graph, test), train.edge_label_index,
                     val.edge_label_index, val.edge_label.float(), test.edge_label_index, test.edge_label.float(),
                     undirected)


def message_graph(graph: Graph, data) -> Graph:
    """The graph of `data`'s edges (a split's message-passing edges) over `graph`'s nodes and
    features, with its edge attributes."""
    edge_attrs = {name: data[name] for name in graph.edge_attrs if name in data}
    return Graph.from_edge_index(data.edge_index, graph.num_nodes, dedup=False, x=graph.x, edge_attrs=edge_attrs,
                                 num_classes=graph.num_classes, name=f"{graph.name}, link split").validate()
