"""The previous release's temporal draws (samplers/temporal.py at commit 6a3ee0e, before its rows
were sorted by time): every candidate edge of the frontier's rows keyed, filtered by time and
ranked. Kept verbatim, as `draw` of a `TemporalSampler` subclass, as the baseline that
benchmarks/temporal_loader.py measures the time-sorted rows against. Not used by conveyor itself."""
from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from conveyor.samplers.temporal import EDGE_TIME, TemporalSampler, every_candidate


class PreviousTemporalSampler(TemporalSampler):
    """`TemporalSampler` drawing as it did before the sort (the sort is built, and unused)."""

    def draw(self, nodes: Tensor, hop: int, owners: Optional[Tensor] = None):
        start, deg, fanout, node_of_row = self.rows(nodes, hop)
        pos, row = every_candidate(start, deg)
        if self.kind is not None:  # only what is not later than the row's seed
            limit = self.seed_time.index_select(0, owners.index_select(0, node_of_row.index_select(0, row)))
            valid = (self.times_of(pos) <= limit).nonzero().squeeze(1)
            pos, row = pos.index_select(0, valid), row.index_select(0, valid)
        keep = self.ranked(pos, row, fanout)
        pos, row = pos.index_select(0, keep), row.index_select(0, keep)
        edges = torch.empty(2, pos.numel(), dtype=torch.long, device=self.device)
        edges[1] = node_of_row.index_select(0, row)
        return pos, edges

    def times_of(self, pos: Tensor) -> Tensor:
        """The time of each edge position: its own, or its source node's."""
        return self.time.index_select(0, pos if self.kind == EDGE_TIME else self.indices.index_select(0, pos).long())

    def ranked(self, pos: Tensor, row: Tensor, fanout: Tensor) -> Tensor:
        """Which candidates each row keeps: its `fanout` first (-1: all) in the strategy's order."""
        if self.strategy == "last" and self.kind is not None:  # latest first; ties: the later position
            flipped = torch.arange(pos.numel() - 1, -1, -1, device=self.device)
            times = self.times_of(pos).index_select(0, flipped)
            order = flipped.index_select(0, torch.argsort(times, descending=True, stable=True))
            order = order.index_select(0, torch.argsort(row.index_select(0, order), stable=True))
        else:  # by row, then by a uniform key within it: one sort (row + u, u in [0, 1), is exact in float64)
            key = torch.rand(pos.numel(), generator=self.generator, device=self.device, dtype=torch.float64)
            order = torch.argsort(key.add_(row))
        counts = torch.bincount(row, minlength=fanout.numel())
        firsts = (torch.cumsum(counts, 0) - counts).repeat_interleave(counts)
        rank = torch.arange(pos.numel(), device=self.device) - firsts
        limit = fanout.index_select(0, row.index_select(0, order))
        return order.index_select(0, ((rank < limit) | (limit < 0)).nonzero().squeeze(1))
