"""The feature cache's settings (`cache.*`), declared once (core/fields.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from conveyor.cache.options import parse_bytes, parse_capacity, parse_dtype
from conveyor.cache.policies import POLICIES
from conveyor.core.fields import REQUIRED, Section, choice, integer, parsed, setting


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
                                   "(each batch's rows converted as they are gathered; the matrix never whole).",
                                   parsed(lambda v: parse_dtype(v, None)))
    host_capacity: Any = setting("auto", "The host tier over features on disk (a mapped file): the hottest rows "
                                 "copied into RAM, degree-ordered, below the device tier. auto: only for a mapped "
                                 "matrix larger than half the memory really available (cgroup limits included), "
                                 "then 40% of that memory; else the features are read in place. A fraction of the "
                                 "nodes or a byte size (\"6GiB\") forces a tier of that size; 0: none.",
                                 parsed(lambda v: parse_capacity(v, "cache.host_capacity")))
    io_threads: int = setting(4, "Threads reading the host tier's misses from disk (preadv, sorted and merged "
                              "rows; they wait on the disk together).", integer(1, 64))
    lookahead: int = setting(4, "Batches the loader looks ahead with a host tier: the rows of the next batches "
                             "the sampler produced are read while the current one trains, and kept while a "
                             "coming batch needs them (Ginex); 0: off.", integer(0, 64))
