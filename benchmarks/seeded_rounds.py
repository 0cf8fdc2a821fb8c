"""Seeded, interleaved rounds of an unedited script under two loaders, and the verdict on their
metrics (benchmarks/pyg_examples.py and benchmarks/typed_link_examples.py).

Round k seeds Python's `random`, numpy and torch with k in the script's own interpreter, then runs
the script (`SEED_PRELUDE`, before `runpy.run_path`): the script file stays as PyG ships it but
for its loader import, and both loaders of a round start from the same state. The loaders' order
alternates from round to round (by the seed). Per example, the rounds give each loader's metric as mean ± sd
(sample sd) and range; the difference of the means is "within noise" when

    |mean_conveyor - mean_pyg| <= 2 * sqrt(sd_conveyor² / n_conveyor + sd_pyg² / n_pyg)

(twice Welch's standard error of the difference: about a 95% interval at these counts, if the
rounds' metrics are roughly normal), else "gap". The epoch time ratio, conveyor over PyG, is
taken round by round (the two runs of a round ran back to back) and given as median (range).
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Optional

# Run in the script's interpreter before the script: `seed` is the round's (None: unseeded).
SEED_PRELUDE = """
def seed_everything(seed):
    import random
    import numpy
    import torch
    random.seed(seed)
    numpy.random.seed(seed)
    torch.manual_seed(seed)
"""


def round_order(loaders: list, seed: int) -> list:
    """The loaders in the order of the round of `seed`: as given for even seeds, reversed for odd ones
    (by the seed, not the round's place, so that rounds run apart and merged still alternate)."""
    return list(loaders) if seed % 2 == 0 else list(loaders)[::-1]


@dataclass(frozen=True)
class Spread:
    n: int
    mean: float
    sd: float  # sample sd (n - 1); 0 for one value
    low: float
    high: float

    @classmethod
    def of(cls, values: list) -> Optional["Spread"]:
        values = [float(v) for v in values if v is not None]
        if not values:
            return None
        sd = statistics.stdev(values) if len(values) > 1 else 0.0
        return cls(len(values), statistics.fmean(values), sd, min(values), max(values))

    def text(self, digits: int = 3) -> str:
        d = digits
        return f"{self.mean:.{d}f} ± {self.sd:.{d}f} ({self.low:.{d}f}-{self.high:.{d}f}; n={self.n})"


@dataclass(frozen=True)
class Verdict:
    diff: float  # conveyor's mean minus PyG's
    bound: float  # 2 * Welch's standard error of the difference
    within_noise: Optional[bool]  # None: too few rounds to tell (fewer than 2 on a side)

    @classmethod
    def of(cls, conveyor: Spread, pyg: Spread) -> "Verdict":
        bound = 2 * math.sqrt(conveyor.sd ** 2 / conveyor.n + pyg.sd ** 2 / pyg.n)
        diff = conveyor.mean - pyg.mean
        enough = conveyor.n >= 2 and pyg.n >= 2
        return cls(diff, bound, abs(diff) <= bound if enough else None)

    def text(self, digits: int = 3) -> str:
        said = {True: "within noise", False: "**gap**", None: "too few rounds"}[self.within_noise]
        return f"{self.diff:+.{digits}f} (bound {self.bound:.{digits}f}): {said}"


def ratio_by_round(conveyor: dict, pyg: dict) -> str:
    """Epoch time conveyor / PyG round by round (round -> a run's median epoch seconds, None where
    it did not run), as median (range) over the rounds both ran."""
    ratios = [conveyor[k] / pyg[k] for k in sorted(conveyor) if conveyor[k] and pyg.get(k)]
    if not ratios:
        return "-"
    text = f"{statistics.median(ratios):.2f}x"
    return text if len(ratios) == 1 else f"{text} ({min(ratios):.2f}-{max(ratios):.2f}x)"
