"""The one exception type for bad user input, and the few helpers its messages share.

It subclasses ValueError (docs/design.md promises a ValueError for bad seeds) and carries a message
written for the person at the keyboard: what is wrong and how to fix it. `launch.py` prints it as
one paragraph and exits non-zero instead of showing a traceback.
"""
from __future__ import annotations

import difflib
import re
from typing import Iterable


class ConveyorError(ValueError):
    """Bad input, a missing dataset or an invalid configuration; the message says the fix."""


class ProcessDied(RuntimeError):
    """A process of the run (a pipeline stage, a DDP rank) was killed or exited without a word: the
    message says all there is (no traceback of its own to show), so the command prints it as one
    paragraph and exits 1, as a torchrun rank that stops says its paragraph."""


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """` (did you mean X?)` for the closest of `choices`, or nothing when none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def one_line(text: str) -> str:
    """A library's message (Hydra's, PyTorch's) on one line, without the search path
    or the key Hydra appends."""
    text = re.split(r"\nConfig search path|\n\s*full_key:", text)[0]
    return " ".join(text.split()).rstrip(".") + "."
