"""Stop requests (Ctrl-C, SIGTERM) that cannot get lost.

Python runs a signal handler between two bytecodes of the main thread, wherever that is: also
inside a weakref callback or a `__del__`, and the async pipeline hands batch buffers back from
such callbacks once the trainer drops a batch. An exception raised there is printed as
"Exception ignored" and dropped, so a KeyboardInterrupt raised by the handler at that moment was
lost and the run trained on. The handler therefore also records the signal, and the training
loop raises it again at its next batch (`raise_if_stop_requested`).
"""
from __future__ import annotations

import signal

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_requested: list[int] = []  # signals whose KeyboardInterrupt may not have reached the loop


def _request_stop(signum, frame):
    _requested.append(signum)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGINT and SIGTERM stop the run as Ctrl-C does (main thread only)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, _request_stop)


def raise_if_stop_requested() -> None:
    """Raise the KeyboardInterrupt of a stop signal that may have been swallowed."""
    if _requested:
        raise KeyboardInterrupt(signal.Signals(_requested.pop()).name)
