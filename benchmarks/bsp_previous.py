"""The previous release's `bsp` (samplers/bsp.py at commit 43e3b50, before #28), kept verbatim as
the baseline that benchmarks/sampling.py measures the current one against. Its draws come from
torch's generator stream (one float64 `rand` per step); today's bsp draws from counter-based
streams (samplers/bsp_compiled.py), so the batches differ draw by draw, but the work is the same:
the same algorithm, sizes alike (the benchmark's `edges vs bsp` column). Not used by conveyor itself."""
from __future__ import annotations

import torch
from torch import Tensor

from conveyor.partition import Graph
from conveyor.samplers.batch import SampledBatch
from conveyor.samplers.validation import cap_fanouts, check_fanouts, check_seeds


def sample_positions(start: Tensor, deg: Tensor, fanout: int, generator: torch.Generator):
    """Draw min(deg, fanout) distinct edge positions per node; return (positions, owner index)."""
    device = start.device
    owner = torch.arange(start.numel(), device=device)
    take_all = deg <= fanout
    # Low-degree nodes keep every neighbour.
    few_owner = torch.repeat_interleave(owner[take_all], deg[take_all])
    first = torch.cumsum(deg[take_all], 0) - deg[take_all]
    offset = torch.arange(few_owner.numel(), device=device) - torch.repeat_interleave(first, deg[take_all])
    few_pos = start[few_owner] + offset
    # High-degree nodes: Floyd's algorithm, one column of picks per step, all nodes at once.
    many = owner[~take_all]
    if many.numel() == 0:  # (fanout -1: always) no draws, and no `fanout` empty steps
        return few_pos, few_owner
    d = deg[many]
    picks = torch.empty(many.numel(), fanout, dtype=torch.long, device=device)
    for i in range(fanout):
        j = d - fanout + i  # pick uniformly from [0, j]; on collision take j itself
        t = (torch.rand(many.numel(), generator=generator, device=device, dtype=torch.float64)
             * (j + 1)).long().clamp_(max=j)
        seen = (picks[:, :i] == t[:, None]).any(1)
        picks[:, i] = torch.where(seen, j, t)
    many_pos = (start[many][:, None] + picks).flatten()
    many_owner = many.repeat_interleave(fanout)
    return torch.cat([few_pos, many_pos]), torch.cat([few_owner, many_owner])


class PreviousBSPSampler:
    name = "bsp (previous release)"

    def __init__(self, graph: Graph, fanouts, device="cpu", seed: int = 0):
        self.device = torch.device(device)
        self.num_nodes = graph.num_nodes
        # Floyd's loop runs `fanout` steps: capped by the largest degree, the same sample costs
        # 168 steps a hop on cora, not 100000 for sampler.fanouts=[100000].
        max_degree = int(graph.in_degree().max()) if self.num_nodes else 0
        self.fanouts = cap_fanouts(check_fanouts(fanouts), max_degree)
        self.indptr = graph.indptr.to(self.device)
        self.indices = graph.indices.to(self.device)
        self.local = torch.full((self.num_nodes,), -1, dtype=torch.long, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.manual_seed(seed)

    def manual_seed(self, seed: int) -> None:
        self.generator.manual_seed(int(seed))

    def sample(self, seeds) -> SampledBatch:
        seeds = check_seeds(seeds, self.num_nodes).to(self.device)
        n_id = [seeds]
        count = seeds.numel()
        self.local[seeds] = torch.arange(count, device=self.device)
        counts, edges = [count], []
        for fanout in self.fanouts:
            targets = torch.cat(n_id)  # every node of N_{h-1} samples again, independently
            start = self.indptr[targets]
            deg = self.indptr[targets + 1] - start
            pos, owner = sample_positions(start, deg, fanout, self.generator)
            nbrs = self.indices[pos].long()
            new = torch.unique(nbrs[self.local[nbrs] < 0])
            self.local[new] = torch.arange(count, count + new.numel(), device=self.device)
            count += new.numel()
            n_id.append(new)
            counts.append(count)
            edges.append(torch.stack([self.local[nbrs], owner]))
        all_ids = torch.cat(n_id)
        self.local[all_ids] = -1  # O(batch) reset for the next call
        return SampledBatch(all_ids, torch.tensor(counts, dtype=torch.long), edges)

    def sample_many(self, seed_list):
        return [self.sample(s) for s in seed_list]
