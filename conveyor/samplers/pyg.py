"""`pyg`: PyG's own neighbour sampler (pyg-lib or torch_sparse underneath), as a baseline.

PyG's semantics differ from conveyor's in one way: a node samples its neighbours once, at the hop
that first reaches it, and a layer's message-flow graph is the union of the hops so far (this is
what PyG's `trim_to_layer` relies on). So `edge_index_per_hop[h-1]` holds every edge sampled in
hops 1..h; the node sets and the prefix property are the same as conveyor's. Sampling runs on
the CPU (as PyG's does); the batch is moved to `device` afterwards.

PyG reports each sampled edge's id in its own CSC arrays; the graph is handed to it in conveyor's
CSC order, already sorted (`is_sorted=True`), so its CSC is conveyor's and the ids are conveyor's
CSC positions (`edge_pos_per_hop`; should PyG ever permute the edges, its `perm` maps them back).
`weight_attr` is handed to PyG's own weighted sampling, which needs pyg-lib >= 0.3 (torch_sparse
has none): without it the sampler refuses by name.
"""
from __future__ import annotations

import torch
import torch_geometric.typing as pyg_typing
from torch_geometric.data import Data
from torch_geometric.sampler import NeighborSampler, NodeSamplerInput

from conveyor.core import ConveyorError
from conveyor.core.cores import sampler_threads, torch_threads
from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.validation import check_fanouts, check_seeds
from conveyor.samplers.weights import edge_weights


def hop_boundaries(num_seeds: int, row, col, num_hops: int):
    """Cumulative node and edge counts per hop, for samplers that do not report them.

    torch_sparse visits the targets of each hop in local-id order and numbers new nodes as it
    meets them, so `col` (the target) never decreases and each hop's new nodes follow the last.
    """
    nodes, edges = [num_seeds], [0]
    end_edge = 0
    for _ in range(num_hops):
        end_edge = int(torch.searchsorted(col, torch.tensor(nodes[-1]), right=False))
        reached = int(row[edges[-1]:end_edge].max()) + 1 if end_edge > edges[-1] else 0
        nodes.append(max(nodes[-1], reached))
        edges.append(end_edge)
    return nodes, edges[1:]


class PyGSampler:
    name = "pyg"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0, weight_attr: str | None = None,
                 threads="auto", replace: bool = False):
        if not (pyg_typing.WITH_PYG_LIB or pyg_typing.WITH_TORCH_SPARSE):
            raise ConveyorError(
                "sampler=pyg needs pyg-lib or torch_sparse, and neither is installed; install the "
                "extra with `pip install --no-build-isolation torch_scatter torch_sparse` (after "
                "torch), or use sampler=bsp.")
        self.fanouts = check_fanouts(fanouts)
        self.threads = sampler_threads(threads)  # as bsp's (core/cores.py)
        weights = edge_weights(graph, weight_attr)
        if weights is not None and not pyg_typing.WITH_WEIGHTED_NEIGHBOR_SAMPLE:
            raise ConveyorError(
                f"sampler=pyg cannot draw by weight_attr={weight_attr!r}: PyG's weighted sampling needs "
                f"pyg-lib >= 0.3, which is not installed (torch_sparse samples uniformly only); install "
                f"pyg-lib, or use sampler=bsp (or fused), which draw by weight as PyG does.")
        self.device = torch.device(device)
        self.num_nodes = graph.num_nodes
        # graph.edge_index() is sorted by destination, which is what PyG's CSC conversion wants.
        data = Data(edge_index=graph.edge_index(), num_nodes=graph.num_nodes)
        if weights is not None:
            data[weight_attr] = weights  # in CSC order, as the edges
        self.sampler = NeighborSampler(data, num_neighbors=self.fanouts, is_sorted=True, weight_attr=weight_attr,
                                       replace=replace)
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(int(seed))  # pyg-lib draws from torch's generator

    def sample(self, seeds) -> SampledBatch:
        with torch_threads(self.threads):
            return self._sample(seeds)

    def _sample(self, seeds) -> SampledBatch:
        seeds = check_seeds(seeds, self.num_nodes)
        out = self.sampler.sample_from_nodes(NodeSamplerInput(input_id=None, node=seeds))
        row, col = out.row.long(), out.col.long()
        if out.num_sampled_nodes is not None:
            nodes = torch.tensor(out.num_sampled_nodes).cumsum(0).tolist()
            edges = torch.tensor(out.num_sampled_edges).cumsum(0).tolist()
        else:
            nodes, edges = hop_boundaries(seeds.numel(), row, col, len(self.fanouts))
        per_hop = [torch.stack([row[:e], col[:e]]).to(self.device) for e in edges]
        positions = self.csc_positions(out.edge)
        return SampledBatch(out.node.to(self.device), torch.tensor(nodes, dtype=torch.long), per_hop,
                            [positions[:e].to(self.device) for e in edges])

    def csc_positions(self, pyg_edge_ids: torch.Tensor) -> torch.Tensor:
        """conveyor's CSC positions of the edges PyG sampled: its ids index its own CSC arrays,
        which are conveyor's unless PyG permuted the edges (`perm`: its position -> ours)."""
        perm = getattr(self.sampler, "perm", None)
        ids = pyg_edge_ids.long()
        return ids if perm is None else perm.long().index_select(0, ids)

    def sample_many(self, seed_list):
        with torch_threads(self.threads):
            return [self._sample(s) for s in seed_list]
