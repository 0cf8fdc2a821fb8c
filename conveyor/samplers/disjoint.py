"""`disjoint`: PyG's `disjoint=True` (pyg-lib's disjoint sampling): each seed of a batch grows its
own subgraph, so a node reached from two seeds is in the batch twice, once in each, and the batch
says whose each node is (`batch`, the seed's index, travelling as the batch's `extras["batch"]`).

The draws are bsp's (`sample_positions`: PyG's per-node draws, each node drawing once, at the hop
after the one that first reached it in its seed's subgraph; with or without replacement). A node of
the batch is the pair (seed index, node id), kept as the key `seed_index * num_nodes + id`: a hop's
new pairs are found against the sorted keys so far, appended in ascending key order (seed by seed,
ids ascending within one, as bsp appends a hop's new nodes). Seeds may repeat: each copy is a seed
of its own, as in PyG. O(sampled edges x log) per hop, no num_nodes-long map.
"""
from __future__ import annotations

import torch
from torch import Tensor

from conveyor.core.cores import sampler_threads, torch_threads
from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.bsp import sample_positions
from conveyor.samplers.validation import check_fanouts, check_seeds


class DisjointSampler:
    name = "disjoint"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0, replace: bool = False, threads="auto"):
        self.fanouts = check_fanouts(fanouts)
        self.replace, self.threads = replace, sampler_threads(threads)
        self.device = torch.device(device)
        self.num_nodes = graph.num_nodes
        self.indptr = graph.indptr.to(self.device)
        self.indices = graph.indices.to(self.device)
        self.generator = torch.Generator(device=self.device)
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    def sample(self, seeds) -> SampledBatch:
        with torch_threads(self.threads):
            return self._sample(seeds)

    def sample_many(self, seed_list):
        with torch_threads(self.threads):
            return [self._sample(s) for s in seed_list]

    def draw(self, nodes: Tensor, hop: int, owners: Tensor | None = None):
        """Hop `hop`'s draws for `nodes` (`owners`: their seeds' indices, which temporal.py's draws read)."""
        start = self.indptr.index_select(0, nodes)
        deg = self.indptr.index_select(0, nodes + 1).sub_(start)
        fanout = self.fanouts[hop]
        every = fanout == -1
        return sample_positions(start, deg, int(deg.max()) if every and deg.numel() else max(fanout, 0),
                                self.generator, replace=self.replace and not every)

    def _sample(self, seeds) -> SampledBatch:
        seeds = check_seeds(seeds, self.num_nodes, unique=False).to(self.device)
        if not seeds.numel():
            hops = len(self.fanouts)
            return SampledBatch(seeds, torch.zeros(hops + 1, dtype=torch.long), [seeds.new_empty(2, 0)] * hops,
                                [seeds.new_empty(0)] * hops, {"batch": seeds.new_empty(0)})
        owner = torch.arange(seeds.numel(), device=self.device)  # each node's seed index
        n_id, keys = seeds, owner * self.num_nodes + seeds
        order = torch.argsort(keys)  # the keys so far, sorted, and where each sits in n_id
        counts, edges, positions = [seeds.numel()], [], []
        for h in range(len(self.fanouts)):
            first = counts[-2] if len(counts) > 1 else 0  # the previous hop's new nodes draw
            pos, hop = self.draw(n_id[first:], h, owner[first:])
            hop[1] += first
            nbrs = self.indices.index_select(0, pos).long()
            wanted = owner.index_select(0, hop[1]) * self.num_nodes + nbrs
            known = keys.index_select(0, order)
            at = torch.searchsorted(known, wanted).clamp_(max=known.numel() - 1)
            new = torch.unique(wanted[known.index_select(0, at) != wanted])
            n_id = torch.cat([n_id, new % self.num_nodes])
            owner = torch.cat([owner, new // self.num_nodes])
            keys = torch.cat([keys, new])
            order = torch.argsort(keys)
            hop[0] = order.index_select(0, torch.searchsorted(keys.index_select(0, order), wanted))
            counts.append(n_id.numel())
            edges.append(hop)
            positions.append(pos)
        return SampledBatch(n_id, torch.tensor(counts, dtype=torch.long), edges, positions, {"batch": owner})
