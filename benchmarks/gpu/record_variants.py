"""A pytest plugin for `--prepare` (`pytest -p benchmarks.gpu.record_variants`): while the fused
sampler's CPU tests run under Triton's interpreter, it records every launch as the GPU would bind
it (the compiled kernel's constexprs for the same widths, picks and batch count, and the launch's
arguments as Triton's binder reads them), so that kernel_cache.py can compile for sm_90 the
variants `pytest -m gpu` launches (the same tests, with `device="cuda"`), not only the suite's own.

The variants go to $GPU_SUITE_VARIANTS (a JSON list, one entry per distinct variant) at the end.
"""
from __future__ import annotations

import json
import os

from benchmarks.gpu.kernel_cache import stand_in, variant_key
from conveyor.samplers import fused

RECORDED: dict[str, dict] = {}
_launch = fused.FusedSampler._launch


def recording_launch(self, caps, flat_seeds, seed_batch, seed_off, num_batches, stream):
    """Record the launch as a GPU binds it (the compiled kernel's constexprs), then run it."""
    args, _ = self._launch_args(caps, flat_seeds, seed_batch, seed_off, num_batches, stream)
    meta = fused.launch_config(self.width, self.picks, num_batches, interpreted=False, weighted=self.weighted)
    label = f"test: {'weighted ' if self.weighted else ''}{meta['L']} hops, W {meta['W']}, x{num_batches}"
    entry = {"label": label, "args": [stand_in(a) for a in args], "meta": meta}
    RECORDED.setdefault(variant_key(entry), entry)
    return _launch(self, caps, flat_seeds, seed_batch, seed_off, num_batches, stream)


fused.FusedSampler._launch = recording_launch


def pytest_sessionfinish(session, exitstatus):
    out = os.environ.get("GPU_SUITE_VARIANTS")
    if out:
        with open(out, "w") as sink:
            json.dump(list(RECORDED.values()), sink)
