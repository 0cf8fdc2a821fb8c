"""`conveyor.LinkNeighborLoader`'s own arguments made into the pipeline's: the links batches are cut
from (`edge_label_index`, `edge_label`, `input_id`), the negatives (`neg_sampling`,
`neg_sampling_ratio`) and PyG's keywords it honours or refuses (the node loader's, keywords.py,
with PyG's LinkLoader's). Each bad argument is one ConveyorError naming the fix, raised before
anything starts."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.loader.inputs import seed_times
from conveyor.loader.keywords import TAKEN, UNSUPPORTED
from conveyor.partition import Graph
from conveyor.samplers.link import NEGATIVE_MODES, Negatives

LINK_TAKEN = {**{k: v for k, v in TAKEN.items() if k != "input_time"},
              "input_id": "the ids each batch reports as input_id (default: positions in edge_label_index), as "
                          "PyG's LinkLoader",
              "edge_label_time": "each link's time (with time_attr): its endpoints' subgraphs hold nothing later, "
                                 "and neither do its negatives, as PyG's"}
LINK_UNSUPPORTED = {**{k: v for k, v in UNSUPPORTED.items() if k != "input_id"},
                    "input_time": (None, "a link's time is its edge_label_time"),
                    "link_sampler": (None, "PyG's link samplers do not draw conveyor's batches: pass your own "
                                           "node sampler as node_sampler= (README: 'Your own sampler or feature "
                                           "source')")}
LINK_OWN = ("data, num_neighbors, edge_label_index, edge_label, batch_size, shuffle, drop_last, neg_sampling, "
            "neg_sampling_ratio, the keywords of PyG's LinkLoader and DataLoader it honours ("
            + ", ".join(LINK_TAKEN) + "), and its own pipeline, node_sampler, cache, device, seed, depth")
# Keys of the user's Data that PyG's link batches set, replace or drop themselves (LinkLoader.filter_fn).
LINK_KEYS = ("edge_label_index", "edge_label", "edge_label_time", "input_id", "src_index", "dst_pos_index",
             "dst_neg_index", "seed_time")


def replaced_keys(negatives: Optional[Negatives]) -> tuple:
    """The keys of the user's Data a batch does not slice: those PyG's link batches replace or
    drop (a triplet batch keeps the data's own edge_label)."""
    triplet = negatives is not None and negatives.mode == "triplet"
    return tuple(k for k in LINK_KEYS if not (triplet and k == "edge_label"))


def label_edges(edge_label_index, data, graph: Graph) -> Tensor:
    """The [2, P] node pairs batches are cut from: given, or (None) every edge of the data, in the
    order of its edge_index (PyG's default). A typed graph's: loader/hetero_links.py."""
    if edge_label_index is None:
        given = getattr(data, "edge_index", None)
        if given is None and not isinstance(data, Graph):  # PyG's loader fails on it too
            raise ConveyorError("conveyor.LinkNeighborLoader was given no edge_label_index and the data has no "
                                "edge_index, so there are no links to cut batches from; pass "
                                "edge_label_index=[2, P] node pairs (the links to score).")
        edges = graph.edge_index() if given is None or isinstance(data, Graph) else given
        return torch.as_tensor(edges).as_subclass(Tensor).long().cpu()
    if isinstance(edge_label_index, (str, tuple, list)):
        raise ConveyorError(f"conveyor.LinkNeighborLoader takes edge_label_index as a [2, P] tensor of node ids "
                            f"(or None: every edge), got {edge_label_index!r}: edge types are for heterogeneous "
                            f"graphs (a HeteroData), and this graph has one type.")
    edges = dense_pairs(edge_label_index, "edge_label_index")
    if edges.numel() and (int(edges.min()) < 0 or int(edges.max()) >= graph.num_nodes):
        raise ConveyorError(f"edge_label_index holds node ids from {int(edges.min())} to {int(edges.max())}, but "
                            f"the graph's nodes are 0..{graph.num_nodes - 1}.")
    return edges


def dense_pairs(value, what: str) -> Tensor:
    """`value` as a CPU int64 [2, P] tensor of node pairs, else a ConveyorError naming `what`."""
    if getattr(value, "layout", torch.strided) != torch.strided:
        raise ConveyorError(f"{what} must be a dense [2, P] tensor of node ids, got a {value.layout} one; pass the "
                            f"pairs it holds, e.g. {what}.coalesce().indices() for a sparse adjacency matrix.")
    edges = torch.as_tensor(value).as_subclass(Tensor)
    if edges.dim() != 2 or edges.size(0) != 2 or edges.dtype.is_floating_point or edges.dtype == torch.bool:
        raise ConveyorError(f"{what} must be an integer tensor of shape [2, P] (sources, destinations), got dtype "
                            f"{edges.dtype} and shape {tuple(edges.shape)}.")
    return edges.long().cpu()


def negatives_of(neg_sampling, neg_sampling_ratio) -> Optional[Negatives]:
    """PyG's neg_sampling (None, "binary"/"triplet", a dict, or its NegativeSampling) and its older
    neg_sampling_ratio (binary negatives, which it overrides when not 0), as conveyor's."""
    if neg_sampling_ratio is not None and neg_sampling_ratio != 0.0:
        return Negatives("binary", neg_sampling_ratio)
    if neg_sampling is None:
        return None
    if isinstance(neg_sampling, str):
        return Negatives(neg_sampling)
    values = dict(neg_sampling) if isinstance(neg_sampling, dict) else vars(neg_sampling)
    if "mode" not in values:
        raise ConveyorError(f"neg_sampling takes a mode ({' or '.join(NEGATIVE_MODES)}) and an amount, e.g. "
                            f"dict(mode='binary', amount=1), got {neg_sampling!r}.")
    weights = {w: None if values.get(w) is None else torch.as_tensor(values[w]).as_subclass(Tensor).cpu()
               for w in ("src_weight", "dst_weight")}
    return Negatives(str(getattr(values["mode"], "value", values["mode"])), values.get("amount", 1), **weights)


def check_weights(negatives: Optional[Negatives], src_count: int, dst_count: int) -> None:
    """Refuse negative weights (PyG's src_weight, dst_weight) that are not one finite value >= 0
    per node of the endpoint's type, with a positive sum."""
    for name, count in (("src_weight", src_count), ("dst_weight", dst_count)):
        weight = None if negatives is None else getattr(negatives, name)
        if weight is None:
            continue
        if weight.shape != (count,) or not (weight.is_floating_point() or weight.dtype in (torch.int32, torch.int64)):
            raise ConveyorError(f"neg_sampling's {name} must be a real tensor of one weight per node of the links' "
                                f"{name[:3]} node type ({count}), got {weight.dtype} of shape {tuple(weight.shape)}.")
        if not bool(torch.isfinite(weight).all()) or bool((weight < 0).any()) or not float(weight.sum()) > 0:
            raise ConveyorError(f"neg_sampling's {name} must be finite weights >= 0 with a positive sum (negatives "
                                f"are drawn in proportion to them).")


def link_labels(edge_label, count: int, negatives: Optional[Negatives]) -> Optional[Tensor]:
    """Each link's label as PyG's LinkLoader takes it: with binary negatives, 0 is the negatives'
    label, so labels given from 0 are shifted up by one; triplet negatives take no labels."""
    if edge_label is None:
        return None
    label = torch.as_tensor(edge_label).as_subclass(Tensor).cpu()
    if label.dim() == 0 or label.size(0) != count:
        raise ConveyorError(f"edge_label must hold one label per link of edge_label_index ({count}), got shape "
                            f"{tuple(label.shape)}.")
    if negatives is not None and negatives.mode == "triplet":
        raise ConveyorError("edge_label must be None with neg_sampling='triplet': the batches say which "
                            "destinations are positive and which negative (src_index, dst_pos_index, "
                            "dst_neg_index).")
    if negatives is not None and label.numel() and label.min() == 0:
        label = label + 1
    return label


def link_times(edge_label_time, time_attr, count: int) -> Optional[Tensor]:
    """Each link's time, which PyG's LinkNeighborLoader takes with time_attr and only with it."""
    if (edge_label_time is not None) != (time_attr is not None):
        raise ConveyorError(f"Received conflicting 'edge_label_time' and 'time_attr' arguments: 'edge_label_time' is "
                            f"{'set' if edge_label_time is not None else 'not set'} while 'time_attr' is "
                            f"{'set' if time_attr is not None else 'not set'}. Give both (temporal sampling: each "
                            f"link's time, and the attribute of the graph's times) or neither.")
    return None if edge_label_time is None else seed_times(edge_label_time, count, "edge_label_time")


def input_ids(input_id, count: int) -> Optional[Tensor]:
    """PyG's input_id: the id each link reports (None: its position)."""
    if input_id is None:
        return None
    ids = torch.as_tensor(input_id).as_subclass(Tensor).cpu()
    if ids.shape != (count,):
        raise ConveyorError(f"input_id must hold one id per link of edge_label_index ({count}), got shape "
                            f"{tuple(ids.shape)}.")
    return ids
