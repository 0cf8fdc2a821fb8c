"""Link-level batches, as PyG's `LinkNeighborLoader` makes them, from any node sampler, where it
draws (the sampler's process under the async pipeline, like samplers/subgraph.py).

A link batch's seeds are positions in a list of node pairs, `edge_label_index` ([2, P]: the
links to score). `LinkSampler.sample(positions)` takes the pairs there, draws the batch's
negatives (PyG's `NegativeSampling`: `binary` draws `ceil(amount * P)` random (source,
destination) pairs; `triplet` draws `amount` random destinations per pair), samples the
neighbourhood of every endpoint (their unique ids, ascending, are the node sampler's seeds, so
`n_id` starts with them, as PyG's) and returns the batch with the links in its local ids as
extras (`SampledBatch.extras`): `edge_label_index` and `edge_label` (binary, or no negatives;
negatives follow the positives and are labelled 0), or `src_index`, `dst_pos_index`,
`dst_neg_index` (triplet). These are PyG's `edge_sample` for homogeneous graphs. With `disjoint`
(the node sampler then samples/disjoint.py's) every endpoint is a seed of its own, in order
(sources, then destinations, negatives included), the links are positions among them, and each
node's subgraph index (the `batch` extra) is taken modulo the batch's positive links, as PyG's.

Negatives are drawn uniformly over the graph's nodes, from the sampler's own generator, which
`manual_seed` restarts with the run's sampler seed: the same seed draws the same negatives in
the serial and the async pipeline. As in PyG, a negative may happen to be an edge of the graph.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from conveyor.core import ConveyorError
from conveyor.core.memory import check_memory
from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.temporal import NODE_TIME, time_of

NEGATIVE_MODES = ("binary", "triplet")
NEGATIVE_STREAM = 0x5DEECE66D  # the negatives' generator: another stream than the node sampler's
RETRIES = 5  # PyG's: redraws of a temporal negative later than its link, before the earliest node is taken


@dataclass(frozen=True)
class Negatives:
    """PyG's `NegativeSampling(mode, amount, src_weight, dst_weight)`: `binary` draws
    ceil(amount x positives) random pairs; `triplet` draws `amount` (a whole number) random
    destinations per positive pair; uniformly over the endpoint's nodes, or with the weights given
    for it (one per node of its type, drawn with replacement as `torch.multinomial`)."""
    mode: str
    amount: float = 1
    src_weight: Optional[Tensor] = field(default=None, compare=False)
    dst_weight: Optional[Tensor] = field(default=None, compare=False)

    def __post_init__(self):
        if self.mode not in NEGATIVE_MODES:
            raise ConveyorError(f"neg_sampling's mode must be binary or triplet, got {self.mode!r}.")
        amount = self.amount
        if isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 < amount < math.inf:
            raise ConveyorError(f"neg_sampling's amount must be a finite number above 0 (negatives per positive "
                                f"link), got {amount!r}.")
        if self.mode == "triplet" and amount != math.ceil(amount):
            raise ConveyorError(f"neg_sampling='triplet' draws a whole number of negative destinations "
                                f"per link: its amount must be an integer, got {amount!r}.")

    def weight(self, endpoint: str) -> Optional[Tensor]:
        return self.src_weight if endpoint == "src" else self.dst_weight

    def check_room(self, batch_size: int, name: str = "neg_sampling's amount") -> None:
        """Refuse an amount (`name`: the setting) whose negatives for one batch of `batch_size`
        links cannot fit in memory (two int64 ids each, drawn, joined, made unique: ~4 copies)."""
        count = math.ceil(batch_size * self.amount)
        check_memory(f"{name}={self.amount:g} ({count:,} negatives a batch of {batch_size:,} links)",
                     {"for the negatives' node ids": 4 * 16 * count}, "cpu", f"Lower {name}, or the batch size.")


def negative_seed(seed: int) -> int:
    return (int(seed) * 6364136223846793005 + NEGATIVE_STREAM) % (2**63)


@dataclass(frozen=True)
class LinkSpec:
    """A `LinkSampler` as a recipe, built where the node sampler is (`sampler`: a sampler or its
    spec; None: zero hops, the endpoints alone)."""
    sampler: Any
    edge_label_index: Tensor  # [2, P] int64: the links batches are cut from, by position
    edge_label: Optional[Tensor] = None  # [P, ...]: each link's label, or None
    negatives: Optional[Negatives] = None
    seed: int = 0
    disjoint: bool = False  # every endpoint its own subgraph (the node sampler must draw so)
    src_nodes: Optional[Tuple[int, int]] = None  # (first id, count) negative sources are drawn from; None: all
    dst_nodes: Optional[Tuple[int, int]] = None  # the same for destinations (a typed graph: the edge type's)
    edge_label_time: Optional[Tensor] = None  # [P]: each link's time (temporal sampling, with time_attr)
    time_attr: Optional[str] = None  # the graph's times: node-level ones bound the negatives too

    def build(self, graph: Graph, device) -> "LinkSampler":
        inner = self.sampler
        if callable(getattr(inner, "build", None)):
            inner = inner.build(graph, device)
        every = (0, graph.num_nodes)
        sampler = LinkSampler(inner, graph.num_nodes, self.edge_label_index, self.edge_label, self.negatives,
                              self.seed, self.disjoint, self.src_nodes or every, self.dst_nodes or every)
        if self.edge_label_time is not None:
            kind, times = time_of(graph, self.time_attr)
            sampler.timed(self.edge_label_time, times if kind == NODE_TIME else None)
        return sampler


class LinkSampler:
    """Link batches (module doc) drawn with the node sampler `sampler` (None: zero hops)."""

    def __init__(self, sampler, num_nodes: int, edge_label_index: Tensor, edge_label: Optional[Tensor] = None,
                 negatives: Optional[Negatives] = None, seed: int = 0, disjoint: bool = False,
                 src_nodes: Optional[Tuple[int, int]] = None, dst_nodes: Optional[Tuple[int, int]] = None):
        self.sampler, self.num_nodes, self.disjoint = sampler, int(num_nodes), disjoint
        self.ranges = {"src": src_nodes or (0, self.num_nodes), "dst": dst_nodes or (0, self.num_nodes)}
        self.edge_label_time: Optional[Tensor] = None
        self.node_time: Optional[Tensor] = None
        self.edge_label_index, self.edge_label, self.negatives = edge_label_index.long(), edge_label, negatives
        self.generator = torch.Generator().manual_seed(negative_seed(seed))
        inner = "endpoints only" if sampler is None else getattr(sampler, "name", type(sampler).__name__)
        self.name = f"{inner}, links" + (f" with {negatives.mode} negatives" if negatives else "")

    def timed(self, edge_label_time: Tensor, node_time: Optional[Tensor]) -> None:
        """Temporal link batches (disjoint): each link's endpoints drawn no later than its time, and
        with node-level times (`node_time`, global ids) its negatives no later either."""
        self.edge_label_time, self.node_time, self.disjoint = edge_label_time, node_time, True

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(negative_seed(seed))
        if callable(getattr(self.sampler, "manual_seed", None)):
            self.sampler.manual_seed(seed)

    def sample(self, positions: Tensor) -> SampledBatch:
        return self.sample_many([positions])[0]

    def sample_many(self, position_list: List[Tensor]) -> List[SampledBatch]:
        """The batches of these positions: their negatives drawn in order, then their nodes' in one
        call of the node sampler (a fused super-batch stays one launch)."""
        links = [self.links(p) for p in position_list]
        seeds, times = [s for s, _ in links], [e.pop("seed_times", None) for _, e in links]
        if self.sampler is None:
            batches = [endpoints_only(s, self.disjoint) for s in seeds]
        elif self.edge_label_time is not None:  # samplers/temporal.py's: each seed its link's time
            batches = [self.sampler.sample_at(s, t) for s, t in zip(seeds, times)]
        elif callable(getattr(self.sampler, "sample_many", None)):
            batches = self.sampler.sample_many(seeds)
        else:
            batches = [self.sampler.sample(s) for s in seeds]
        if self.disjoint:  # PyG's: a link's source and destination subgraphs share its index
            extras = [{**e, "batch": b.extras["batch"] % p.numel()} for b, (_, e), p in zip(batches, links,
                                                                                             position_list)]
            links = [(s, e) for (s, _), e in zip(links, extras)]
        return [dataclasses.replace(b, extras={**b.extras, **extras}) for b, (_, extras) in zip(batches, links)]

    def links(self, positions: Tensor) -> Tuple[Tensor, Dict[str, Tensor]]:
        """The batch's seed nodes (unique, ascending) and its links in their local ids."""
        positions = torch.as_tensor(positions).long().cpu()
        src, dst = self.edge_label_index[:, positions]
        label = None if self.edge_label is None else self.edge_label[positions]
        times = None if self.edge_label_time is None else self.edge_label_time[positions]
        mode = None if self.negatives is None else self.negatives.mode
        if mode == "binary":
            src, dst, label = self.with_binary_negatives(src, dst, label, times)
        elif mode == "triplet":
            dst = torch.cat([dst, self.draw(src.numel() * int(self.negatives.amount), "dst", times)])
        seeds = torch.cat([src, dst])
        if self.disjoint:  # each endpoint a seed of its own, in order
            local = torch.arange(seeds.numel())
        else:
            seeds, local = torch.unique(seeds, return_inverse=True)
        if mode == "triplet":
            count = positions.numel()
            negative = local[2 * count:].view(-1, count).t() if self.disjoint else local[2 * count:]
            extras = {"src_index": local[:count], "dst_pos_index": local[count:2 * count],
                      "dst_neg_index": negative.reshape(count, -1).squeeze(-1)}
        else:
            extras = {"edge_label_index": local.view(2, -1), **({} if label is None else {"edge_label": label})}
        if times is not None:  # PyG's: a negative takes its positive's time, in turn (edge_sample)
            src_time, dst_time = repeated(times, seeds.numel() - dst.numel()), repeated(times, dst.numel())
            extras.update({"seed_time": times} if mode == "triplet" else {"edge_label_time": src_time})
            extras["seed_times"] = torch.cat([src_time, dst_time])
        return seeds, extras

    def with_binary_negatives(self, src: Tensor, dst: Tensor, label: Optional[Tensor], times: Optional[Tensor]):
        """The positive pairs followed by ceil(amount x P) random ones, labelled 0 (the positives
        1 when no label was given): PyG's binary negative sampling."""
        count = math.ceil(src.numel() * self.negatives.amount)
        src, dst = torch.cat([src, self.draw(count, "src", times)]), torch.cat([dst, self.draw(count, "dst", times)])
        label = torch.ones(src.numel() - count) if label is None else label
        return src, dst, torch.cat([label, label.new_zeros((count, *label.shape[1:]))])

    def draw(self, count: int, endpoint: str, times: Optional[Tensor] = None) -> Tensor:
        """`count` random nodes for the `endpoint` ("src" or "dst") of negative links: global ids in
        its node range (a typed graph's: the edge type's node type), uniformly or by its weights;
        with node-level times, negative k no later than the positive links' `times[k % P]`."""
        if times is not None and self.node_time is not None:
            return self.timed_draw(count, endpoint, times)
        first, size = self.ranges[endpoint]
        weight = self.negatives.weight(endpoint)
        if weight is not None:
            picks = torch.multinomial(weight.double(), count, replacement=True, generator=self.generator) \
                if count else torch.empty(0, dtype=torch.long)
            return picks + first
        if size == 0:
            raise ConveyorError("negative sampling draws random nodes, but the graph has none of the links' "
                                f"{endpoint} node type.")
        return torch.randint(size, (count,), generator=self.generator) + first


    def timed_draw(self, count: int, endpoint: str, times: Tensor) -> Tensor:
        """PyG's temporal negatives (neg_sample): ceil(amount) draws per positive link, each later
        than its link redrawn up to 5 times, then the range's earliest node; the first `count`."""
        per_link, links = math.ceil(self.negatives.amount), times.numel()
        out = self.draw(per_link * links, endpoint).view(per_link, links)
        limit = times.view(1, -1).expand(per_link, -1)
        late = self.node_time[out] > limit
        for _ in range(RETRIES):
            if not bool(late.any()):
                break
            out[late] = self.draw(int(late.sum()), endpoint)
            late[late.clone()] = self.node_time[out[late]] > limit[late]
        if bool(late.any()):
            first, size = self.ranges[endpoint]
            out[late] = first + int(torch.argmin(self.node_time[first:first + size]))
        return out.reshape(-1)[:count]


def repeated(times: Tensor, count: int) -> Tensor:
    """`times` repeated in turn to `count` entries (PyG's edge_label_time.repeat(...)[:count])."""
    return times.repeat(math.ceil(count / max(times.numel(), 1)))[:count]


def endpoints_only(seeds: Tensor, disjoint: bool = False) -> SampledBatch:
    """A batch of zero hops: the seeds alone (PyG's num_neighbors=[]; disjoint: each its own)."""
    return SampledBatch(seeds, torch.tensor([seeds.numel()]), [], [],
                        {"batch": torch.arange(seeds.numel())} if disjoint else {})
