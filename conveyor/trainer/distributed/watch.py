"""Under torchrun, a rank that dies stops the others within a minute, in one paragraph naming it.

torchrun's agents watch only their own machine's ranks. When a rank elsewhere dies, the others
learn it from gloo's "Connection closed by peer" at their next collective, which names an address,
or, when its machine vanished without closing its sockets, not before `run.dist_timeout_s`; when
an agent is killed, its rank went on as an orphan and the other agent waited at torchrun's exit
barrier. So each rank:

- dies with its agent (PR_SET_PDEATHSIG): a killed agent takes its ranks along, as a machine that
  goes down would, and the others stop at their next collective;
- says it is alive: a thread adds one to its counter in the job's store (the c10d store torchrun
  gives the ranks, MASTER_ADDR:MASTER_PORT) every `BEAT_S`, with its host and pid, and watches the
  others' counters. A counter that stands still for `STALE_S` (a rank killed, frozen, or behind a
  network that lost it) or a store that stops answering (the agent that keeps it is gone) stops
  this rank in one paragraph, even while it waits inside a collective;
- when a collective fails, looks at the counters for up to `SETTLE_S` to name the rank that died
  (and its own words, if it failed with an error: `report`), rather than gloo's address.
The paragraph goes to stderr and into torchrun's error file, so torchrun's failure summary quotes
it instead of a traceback; the checkpoints stay, and the same command with run.resume=true goes
on. The thread beats while the main thread computes (every op that takes long releases the GIL).
"""
from __future__ import annotations

import datetime
import functools
import json
import logging
import os
import socket
import sys
import threading
import time
from typing import Dict, Optional

import torch.distributed as dist

from conveyor.pipeline.shutdown import die_with_parent

BEAT_S = 0.5  # how often a rank adds to its counter
STALE_S = 30.0  # a counter standing still this long: that rank is dead (or frozen)
SETTLE_S = 4.0  # after a failed collective, how long the counters are watched to name the dead rank
STORE_TIMEOUT_S = 10.0


class RankWatch:
    """This rank's heartbeat and its view of the others' (see the module doc)."""

    def __init__(self, rank: int, world_size: int, resume_hint: str):
        self.rank, self.world_size, self.resume_hint = rank, world_size, resume_hint
        prefix = f"conveyor-watch/{os.environ.get('TORCHELASTIC_RUN_ID', '')}/" \
                 f"{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}/"
        self.address = (os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]))
        self.store = dist.PrefixStore(prefix, dist.TCPStore(
            *self.address, is_master=False, timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S)))
        self.store.set(f"who/{rank}", f"{socket.gethostname()}, pid {os.getpid()}")
        now = time.monotonic()
        self.seen: Dict[int, tuple[int, float]] = {r: (-1, now) for r in range(world_size) if r != rank}
        self.names: Dict[int, str] = {}  # who each rank is, kept to name one once the store is gone
        self.lock = threading.Lock()  # one paragraph, from whichever side finds the fault first
        self.seen_lock = threading.Lock()  # `seen`: updated by the watch thread and, on a fault, the main one
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._beat, name="conveyor-rank-watch", daemon=True)
        self.thread.start()

    def close(self, finished: bool = True) -> None:
        """Stop beating; `finished`: this rank ended its run, so the others do not wait for it.
        The beat under way is waited for: a thread still inside the store's C++ client when the
        interpreter ends aborts the process (SIGABRT, "terminate called without an active exception")."""
        self.stopped.set()
        if threading.current_thread() is not self.thread:
            self.thread.join(timeout=STORE_TIMEOUT_S + BEAT_S)
        if finished:
            try:
                self.store.set(f"done/{self.rank}", "1")
            except Exception:  # noqa: BLE001 -- the store may be gone with the job's end
                pass

    def report(self, message: str) -> None:
        """This rank fails with `message`: the others name it with these words."""
        try:
            self.store.set(f"failed/{self.rank}", message[:2000])
        except Exception:  # noqa: BLE001 -- the store may be what failed
            pass

    def store_alive(self) -> bool:
        """Whether the store still takes connections: asked with a plain socket first, as a store
        operation that fails prints torch's warning with its C++ stack."""
        try:
            socket.create_connection(self.address, timeout=STORE_TIMEOUT_S / 2).close()
            return True
        except OSError:
            return False

    def _beat(self) -> None:
        while not self.stopped.wait(BEAT_S):
            if not self.store_alive():
                self.stop_unless_closed(self.store_gone)
                return
            try:
                self.store.add(f"beat/{self.rank}", 1)
                dead = self.stale(STALE_S)
            except Exception:  # noqa: BLE001 -- a store that has just gone raises anything
                self.stop_unless_closed(self.store_gone)
                return
            if dead:
                how = f"stopped answering {STALE_S:.0f} s ago"
                self.stop_unless_closed(functools.partial(self.describe, dead, how))
                return

    def stop_unless_closed(self, paragraph) -> None:
        """stop() with `paragraph()`, unless this rank closed its watch meanwhile: a run that ended
        may see the store go with its agent while this thread was still on its beat, and must
        still exit 0."""
        if not self.stopped.is_set():
            self.stop(paragraph())

    def stale(self, after_s: float) -> list:
        """The ranks whose counter has not moved for `after_s` seconds."""
        with self.seen_lock:
            now = time.monotonic()
            for r, (count, _) in list(self.seen.items()):
                self.name(r)  # while the store answers
                if self.store.check([f"done/{r}"]):  # finished its run: not waited for
                    del self.seen[r]
                    continue
                latest = self.store.add(f"beat/{r}", 0)
                if latest != count:
                    self.seen[r] = (latest, now)
            return [r for r, (_, since) in self.seen.items() if now - since > after_s]

    def explain(self) -> Optional[str]:
        """After a failed collective: the paragraph naming the rank that died, once its counter
        stood still for a few beats (None if every rank is alive: the failure was this rank's own)."""
        deadline = time.monotonic() + SETTLE_S
        if not self.store_alive():
            return self.store_gone()
        try:
            while time.monotonic() < deadline:
                dead = self.stale(2.5 * BEAT_S)
                if dead:
                    return self.describe(dead, "died")
                time.sleep(BEAT_S / 2)
            failed = [r for r in self.seen if self.store.check([f"failed/{r}"])]
        except Exception:  # noqa: BLE001
            return self.store_gone()
        return self.describe(failed, "failed") if failed else None

    def describe(self, ranks: list, how: str) -> str:
        """`ranks` named (host, pid, and their own words if they failed with an error)."""
        who = [f"rank {r} of {self.world_size} ({self.name(r)}) {how}{self.own_words(r)}" for r in ranks]
        return f"{'; '.join(who)}, so rank {self.rank} stops too (every rank of a DDP job must). {self.resume_hint}"

    def name(self, r: int) -> str:
        if r not in self.names:
            try:
                if self.store.check([f"who/{r}"]):
                    self.names[r] = self.store.get(f"who/{r}").decode()
            except Exception:  # noqa: BLE001
                pass
        return self.names.get(r, "host and pid unknown")

    def own_words(self, r: int) -> str:
        try:
            return f" ({self.store.get(f'failed/{r}').decode()})" if self.store.check([f"failed/{r}"]) else ""
        except Exception:  # noqa: BLE001
            return ""

    def store_gone(self) -> str:
        """The store's agent has ended (killed, or stopped as one of its ranks died): with two ranks
        the other one is the one gone (this one is alive); with more, those that had stopped beating."""
        others = [r for r in range(self.world_size) if r != self.rank]
        now = time.monotonic()
        gone = others if len(others) == 1 else [r for r, (_, since) in self.seen.items() if now - since > 2 * BEAT_S]
        named = "".join(f", {self.describe_briefly(r)}" for r in gone)
        return (f"the job's store at {self.address[0]}:{self.address[1]} stopped answering: the torchrun agent "
                f"that keeps it has ended (killed, or stopped as its rank died){named}, so rank {self.rank} stops "
                f"too (every rank of a DDP job must). {self.resume_hint}")

    def describe_briefly(self, r: int) -> str:
        return f"and with it rank {r} of {self.world_size} ({self.names.get(r, 'host and pid unknown')})"

    def stop(self, paragraph: str) -> None:
        """Say `paragraph` and end this process (from either thread; the first one to call it).
        At once: the main thread may be inside a collective only run.dist_timeout_s would end, and
        the interpreter's teardown, with a peer or the store gone, aborts in the process group's
        threads (SIGABRT)."""
        if not self.lock.acquire(blocking=False):
            while True:  # the other thread is saying it and ending the process
                time.sleep(1)
        say(paragraph)
        logging.shutdown()  # run.log (rank 0) gets what it holds
        os._exit(1)


def say(paragraph: str) -> None:
    """The paragraph on stderr and in torchrun's error file (its summary then quotes it)."""
    print(f"conveyor: error: {paragraph}", file=sys.stderr, flush=True)
    error_file(paragraph)


def error_file(paragraph: str) -> None:
    """`paragraph` as torchrun's error file of this rank: the failure summary quotes it in place of
    a traceback."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if path:
        record = {"message": {"message": f"ConveyorError: {paragraph}",
                              "extraInfo": {"py_callstack": paragraph, "timestamp": str(int(time.time()))}}}
        with open(path, "w") as file:
            json.dump(record, file)


def die_with_agent() -> None:
    """A rank torchrun started ends with its agent (a killed agent would leave it an orphan)."""
    die_with_parent()
