"""The feature cache's settings (`cache.*`), declared once (core/fields.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from conveyor.cache.options import parse_bytes, parse_capacity, parse_dtype
from conveyor.cache.policies import POLICIES
from conveyor.core.fields import REQUIRED, Section, choice, parsed, setting


@dataclass(frozen=True, kw_only=True)
class CacheSettings(Section):
    SECTION: ClassVar[str] = "cache"
    OPTIONS: ClassVar[dict] = {  # the config group's options (conf/cache/*.yaml), for --help
        "degree": "PaGraph's static cache: the highest out-degree nodes' features stay on the training device.",
        "random": "Baseline: the same amount of memory holding a random set of nodes (seeded by run.seed).",
        "none": "No cache: every feature row is read from host memory (the baseline for the cache's gain)."}

    policy: str = setting(REQUIRED, "which nodes' features the cache keeps (the option chosen in group cache)",
                          choice(POLICIES))
    capacity: Any = setting("auto", "A fraction of the nodes in [0, 1], a byte size of feature rows (\"4GiB\"), "
                            "or auto: fill the device memory left after the training's measured peak (on CPU: "
                            "the available host memory).", parsed(parse_capacity))
    reserve: Any = setting("1GiB", "Device memory auto leaves free for fluctuations (PaGraph found 1 GB enough).",
                           parsed(lambda v: parse_bytes(v, "cache.reserve")))
    prefetch: Any = setting("512MiB", "Device memory auto leaves for batches waiting in the prefetch queue after "
                            "warm-up.", parsed(lambda v: parse_bytes(v, "cache.prefetch")))
    dtype: Optional[str] = setting(None, "null keeps the features' dtype; float16 or bfloat16 halve the bytes "
                                   "(converted once at build).", parsed(lambda v: parse_dtype(v, None)))
