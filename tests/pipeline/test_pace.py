"""The pace controller on its own, fed by a simulated producer -> queue -> trainer (no processes):
with the stage times injected, the limits settle, the trainer does not wait when the producer can
keep up, and the queue never holds more than `depth` batches."""
import pytest

from conveyor.pipeline.pace import PaceController
from conveyor.pipeline.settings import PaceSettings

DEPTH = 4


class Simulation:
    """One paced queue in simulated time. The producer makes batch i as soon as it is free and
    the queue is below the limit (`has_room`: i - taken < limit); the trainer takes batch j once
    it is made and it has finished batch j - 1. A decision every `interval` trainer iterations.
    `waits`: the trainer's wait per window, but for each run's first batch (start-up latency)."""

    def __init__(self, produce_s, train_s, interval=10, patience=5):
        self.produce_s, self.train_s = produce_s, train_s
        self.pace = PaceController(["ready"], DEPTH, PaceSettings(interval=interval, patience=patience))
        self.now = 0.0  # when the trainer is free
        self.limits, self.waits, self.deepest = [], [], 0
        self._window = [0.0, 0.0, 0.0]  # start, trainer wait, producer held back

    def run(self, batches: int, first: int = 0) -> None:
        """One run() of `batches` batches: the queue starts empty, the producer when asked."""
        finished, taken = [], []
        for j in range(batches):
            self._produce_ahead(finished, taken, j, batches, first)
            depth = sum(1 for f in finished[j:] if f <= self.now)
            self.deepest = max(self.deepest, depth)
            take = max(finished[j], self.now)
            if j:  # the first batch of a run: start-up latency, which no limit can change
                self._window[1] += take - self.now
            taken.append(take)
            self.now = take + self.train_s(first + j)
            if self.pace.observe({"ready": depth}):
                self._decide()

    def _produce_ahead(self, finished, taken, j, batches, first):
        """Every batch the producer can have started by now: batch i needs batch i - limit taken."""
        start_of_run = taken[0] if taken else self.now
        while len(finished) < batches and len(finished) - self.pace.limits["ready"] < j:
            i = len(finished)
            free = finished[-1] if finished else start_of_run
            room = taken[i - self.pace.limits["ready"]] if i >= self.pace.limits["ready"] else free
            self._window[2] += max(0.0, room - free)
            finished.append(max(free, room) + self.produce_s(first + i))

    def _decide(self):
        start, wait, held = self._window
        wall = self.now - start
        self.pace.decide({"ready": wait / wall}, {"ready": held / wall})
        self.limits.append(self.pace.limits["ready"])
        self.waits.append(wait / wall)
        self._window = [self.now, 0.0, 0.0]

    def epochs(self, count=8, batches=100):
        for epoch in range(count):
            self.run(batches, first=epoch * batches)
        return self


def settled_after(limits) -> int:
    """The number of decisions after which the limit no longer changed."""
    changes = [i for i in range(1, len(limits)) if limits[i] != limits[i - 1]]
    return changes[-1] + 1 if changes else 0


SCENARIOS = {  # (seconds to produce batch k, seconds to train it); the trainer takes 1 s
    "producer faster": (lambda k: 0.3, lambda k: 1.0),
    "producer slower": (lambda k: 1.5, lambda k: 1.0),
    "alternating per batch": (lambda k: 0.3 if k % 2 else 1.5, lambda k: 1.0),  # 0.9 s on average
    "alternating per 50 batches": (lambda k: 0.3 if k // 50 % 2 else 1.6, lambda k: 1.0),
}


@pytest.mark.parametrize("name", SCENARIOS)
def test_the_limits_settle_and_stay_within_depth(name):
    sim = Simulation(*SCENARIOS[name]).epochs()  # 80 decisions
    changes = len(sim.pace.decisions)
    assert changes <= sim.pace.max_changes == 9, sim.limits
    assert settled_after(sim.limits) <= 20, sim.limits  # the last change by the 20th decision
    assert sim.deepest <= DEPTH and all(1 <= limit <= DEPTH for limit in sim.limits)


@pytest.mark.parametrize("name", ["producer faster", "alternating per batch"])
def test_the_trainer_hardly_waits_when_the_producer_keeps_up(name):
    sim = Simulation(*SCENARIOS[name]).epochs()
    assert max(sim.waits[settled_after(sim.limits):]) < 0.05, sim.waits


def test_a_producer_that_stays_ahead_is_held_to_one_batch():
    """A full queue in front of a trainer that never waits: the limit drops to 1 (under MPS the
    producer then competes less with the trainer; less memory everywhere), and stays there."""
    sim = Simulation(*SCENARIOS["producer faster"]).epochs()
    assert sim.limits[-1] == 1 and [(d.old, d.new) for d in sim.pace.decisions] == [(4, 3), (3, 2), (2, 1)]


def test_a_slow_producer_moves_no_limit():
    """The trainer waits, but the producer runs flat out: a higher limit would not help."""
    sim = Simulation(*SCENARIOS["producer slower"]).epochs()
    assert sim.pace.decisions == [] and min(sim.waits) > 0.25


def test_a_limit_that_made_the_trainer_wait_is_not_tried_again():
    pace = PaceController(["ready"], 4, PaceSettings(interval=5, patience=5))
    for _ in range(200):  # full, no wait: tightened down to 1
        if pace.observe({"ready": pace.limits["ready"]}):
            pace.decide({"ready": 0.0}, {"ready": 0.5})
    assert pace.limits["ready"] == 1
    for _ in range(5):  # the trainer waited because the producer was held back at 1
        pace.observe({"ready": 0})
    assert [(d.old, d.new) for d in pace.decide({"ready": 0.2}, {"ready": 0.2})] == [(1, 2)]
    for _ in range(200):  # full again: but 1 made the trainer wait, so 2 it stays
        if pace.observe({"ready": 2}):
            assert pace.decide({"ready": 0.0}, {"ready": 0.5}) == []
    assert pace.limits["ready"] == 2 and pace.floors["ready"] == 2


def test_a_balanced_pipeline_is_left_alone():
    pace = PaceController(["sampled", "ready"], 4, PaceSettings(interval=5, patience=5))
    for step in range(100):  # depths that go up and down, consumers that hardly wait
        if pace.observe({"sampled": step % 3, "ready": (step + 1) % 2}):
            assert pace.decide({"sampled": 0.01, "ready": 0.02}, {"sampled": 0.3, "ready": 0.3}) == []
    assert pace.limits == {"sampled": 4, "ready": 4}
