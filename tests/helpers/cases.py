"""The hostile sweeps' harness (tests/entry/test_hostile_doors.py, tests/entry/test_hostile_round4.py)."""
from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import pytest

from conveyor.core import ConveyorError

# -- the hostile sweeps' harness (test_hostile_doors.py, test_hostile_round4.py) ----------------

@dataclass(frozen=True)
class Expect:
    words: tuple = ()  # a refusal: words its paragraph must hold
    check: Optional[Callable[[Any, Any], None]] = None  # a result: check(result, fixtures)

    @property
    def refuses(self) -> bool:
        return self.check is None


def refused(*words: str) -> Expect:
    return Expect(words=words)


def correct(check: Callable[[Any, Any], None] = lambda result, fx: None) -> Expect:
    return Expect(check=check)


@dataclass(frozen=True)
class Case:
    door: str
    name: str
    call: Callable[[Any], Any]  # call(fixtures)
    expect: Expect = field(default_factory=refused)

    @property
    def id(self) -> str:
        return f"{self.door}: {self.name}"


def run_case(case: Case, fx) -> None:
    """The harness: a paragraph where a refusal is expected, the checked result otherwise, and
    anything else (a traceback of another type, a refusal of a sound call) a failure."""
    try:
        result = case.call(fx)
    except ConveyorError as error:
        text = str(error)
        assert case.expect.refuses, f"{case.id} was refused although sound: {text}"
        assert text.strip() and "\n" not in text.strip() and "Traceback" not in text, text
        for word in case.expect.words:
            assert word in text, (word, text)
        return
    except Exception:  # noqa: BLE001 -- what the sweep looks for
        pytest.fail(f"{case.id}: a traceback instead of one paragraph:\n{traceback.format_exc()}")
    assert not case.expect.refuses, f"{case.id} was accepted: {type(result).__name__} (expected a refusal)"
    case.expect.check(result, fx)
