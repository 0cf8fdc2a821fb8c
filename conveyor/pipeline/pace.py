"""The pace controller (TurboGNN's runtime monitor): how far each producer may run ahead.

Each queue of the pipeline has a limit, the number of batches its producer may have waiting in it,
between 1 and `depth` (the memory bound). The trainer reports each queue's depth every iteration,
and every `interval` iterations the controller decides per queue, from the last `patience` depths
and, over the window, the fraction of time the consumer waited for the queue and the fraction the
producer was held back (paced) by its limit:

- **loosen** (limit + 1, up to `depth`): the consumer waited more than `wait_fraction` *and* the
  producer was held back more than `wait_fraction`. The limit was what made the consumer wait. A
  consumer that waits for a producer running flat out (not held back) is not helped by a higher
  limit, so nothing changes: a slow producer, or an epoch's first batches, move no limit.
- **tighten** (limit - 1): the queue stayed full (at its limit, or one below just after the
  consumer took a batch) for `patience` iterations while the consumer waited at most
  `wait_fraction`. The producer is ahead of its consumer; fewer batches held means less memory
  and, when the producer shares the trainer's GPU (under MPS), fewer bursts of its work competing
  with the trainer's. A full queue is not a fault, but at a lower limit it stays full just as well.
- **floor**: a loosening sets the queue's floor to the new limit, and no tightening goes below it:
  the limit at which the consumer had to wait is never tried again.

So a limit settles. The floor only rises, each loosening raises it, and it cannot pass `depth`, so
a queue loosens at most `depth - 1` times and tightens at most `(depth - 1) + loosenings` times:
at most `3 * (depth - 1)` changes per queue over a whole run (`max_changes`), whatever the stage
times do, and none once the stage times are steady and the limit is at the floor or the queue
stops filling. Before, tightening on a full queue and loosening on any wait made the limits flap
(4 -> 3 -> 4 every epoch on the default run, where each epoch starts with empty queues).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Mapping

from conveyor.pipeline.settings import PaceSettings


@dataclass
class Decision:
    queue: str
    old: int
    new: int
    reason: str


class PaceController:
    def __init__(self, queues, depth: int, pace: PaceSettings):
        """`depth`: the highest limit (`pipeline.depth`); `pace`: `pipeline.pace` (interval,
        patience, wait_fraction: see the module doc)."""
        self.depth, self.interval, self.patience = depth, pace.interval, pace.patience
        self.wait_fraction = pace.wait_fraction
        self.limits: Dict[str, int] = {q: self.depth for q in queues}
        self.floors: Dict[str, int] = {q: 1 for q in queues}
        self.depths = {q: deque(maxlen=self.patience) for q in queues}
        self.decisions: List[Decision] = []  # every change so far
        self.iterations = 0

    @property
    def max_changes(self) -> int:
        """The most limit changes one queue can see over a run (see the module doc)."""
        return 3 * (self.depth - 1)

    def observe(self, depths: Mapping[str, int]) -> bool:
        """Record this iteration's queue depths; True when a decision is due."""
        for queue, recent in self.depths.items():
            recent.append(int(depths[queue]))
        self.iterations += 1
        return self.iterations % self.interval == 0

    def decide(self, waited: Mapping[str, float], paced: Mapping[str, float]) -> List[Decision]:
        """New limits. Per queue, over the last window: `waited`, the fraction of the time its
        consumer waited for a batch from it; `paced`, the fraction its producer was held back."""
        decisions = []
        for queue in self.depths:
            decision = self._decide_queue(queue, waited.get(queue, 0.0), paced.get(queue, 0.0))
            if decision is not None:
                self.limits[queue] = decision.new
                self.depths[queue].clear()  # judge the new limit on its own iterations
                decisions.append(decision)
        self.decisions += decisions
        return decisions

    def _decide_queue(self, queue: str, waited: float, paced: float):
        limit, recent = self.limits[queue], self.depths[queue]
        if waited > self.wait_fraction and paced > self.wait_fraction and limit < self.depth:
            self.floors[queue] = limit + 1
            return Decision(queue, limit, limit + 1, f"its consumer waited {waited:.0%} of the time "
                            f"while its producer was held back {paced:.0%}")
        full = len(recent) == self.patience and min(recent) >= max(limit - 1, 1)
        if full and waited <= self.wait_fraction and limit - 1 >= self.floors[queue]:
            return Decision(queue, limit, limit - 1, f"it stayed full for {self.patience} "
                            f"iterations (depths {list(recent)}) and its consumer did not wait")
        return None
