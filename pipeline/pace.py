"""The pace controller (TurboGNN's runtime monitor): how far each producer may run ahead.

Each queue of the pipeline has a limit, the number of batches its producer may have waiting in it
(between 1 and `depth`, the memory bound). The trainer reports each queue's depth every
iteration, and every `interval` iterations the controller looks at the last `patience` of them and
at how long each consumer waited:
- a queue that kept growing, or stayed full, for `patience` iterations in a row (TurboGNN: five)
  has a producer that outruns its consumer: its limit drops by one. Fewer batches held means
  less memory, and on a shared GPU less of the time a runaway producer takes from the trainer;
- a consumer that spent more than `wait_fraction` of the window waiting for the queue has a
  producer that falls behind: its limit rises by one (up to `depth`), letting it run further ahead.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Dict, List, Mapping


@dataclass
class Decision:
    queue: str
    old: int
    new: int
    reason: str


class PaceController:
    def __init__(self, queues, depth: int, interval: int = 10, patience: int = 5,
                 wait_fraction: float = 0.05):
        self.depth, self.interval, self.patience = int(depth), int(interval), int(patience)
        self.wait_fraction = float(wait_fraction)
        self.limits: Dict[str, int] = {q: self.depth for q in queues}
        self.depths = {q: deque(maxlen=self.patience) for q in queues}
        self.decisions: List[Decision] = []  # every change so far
        self.iterations = 0

    def observe(self, depths: Mapping[str, int]) -> bool:
        """Record this iteration's queue depths; True when a decision is due."""
        for queue, recent in self.depths.items():
            recent.append(int(depths[queue]))
        self.iterations += 1
        return self.iterations % self.interval == 0

    def decide(self, waited: Mapping[str, float]) -> List[Decision]:
        """New limits from the recorded depths and `waited`: per queue, the fraction of the last
        window its consumer spent waiting for a batch from it."""
        decisions = []
        for queue, recent in self.depths.items():
            limit = self.limits[queue]
            new, reason = limit, ""
            if waited.get(queue, 0.0) > self.wait_fraction and limit < self.depth:
                new = limit + 1
                reason = f"its consumer waited {waited[queue]:.0%} of the time"
            elif len(recent) == self.patience and limit > 1 and self._crowded(recent, limit):
                new = limit - 1
                reason = (f"it grew or stayed full for {self.patience} iterations "
                          f"(depths {list(recent)})")
            if new != limit:
                self.limits[queue] = new
                recent.clear()  # judge the new limit on its own iterations
                decisions.append(Decision(queue, limit, new, reason))
        self.decisions += decisions
        return decisions

    @staticmethod
    def _crowded(recent, limit: int) -> bool:
        depths = list(recent)
        growing = all(b >= a for a, b in zip(depths, depths[1:])) and depths[-1] > depths[0]
        # Read when the trainer asks for a batch; a queue its producer keeps full shows `limit`,
        # or `limit - 1` when its consumer has just taken one.
        full = min(depths) >= max(limit - 1, 1)
        return growing or full
