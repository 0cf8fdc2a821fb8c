"""What a call returns, rewritten the moment each step ends, so that a call stopped at any second
returns every step it finished: into $OUT (the device tool brings back at most 8 files) go

- <command>.json: the command's record (device, commit, the fused kernel's source hash, budget,
  every finished step's status, figures and log tail); also <folder>/result.json;
- <command>.tar.gz: the command's whole folder (every step's JSON, logs, benchmark output) as
  <command>/, rewritten as it grows (written beside, then renamed: never half an archive);
- summary.md: the table over every command found under benchmarks/results/<device>/.
"""
from __future__ import annotations

import json
import os
import tarfile
import time
from pathlib import Path

from benchmarks.gpu import summary
from benchmarks.gpu.common import Context, rel

MAX_ARCHIVED_BYTES = 2 * 2**20  # a bigger file (a runaway log) stays out of the archive, named in the record
TAIL_LINES, TAIL_CHARS = 25, 3000


def log_tails(logs: list[Path]) -> dict:
    """The last lines of each log a step wrote: what went wrong, without unpacking the archive."""
    tails = {}
    for log in logs:
        try:
            lines = log.read_text(errors="replace").splitlines()[-TAIL_LINES:]
        except OSError:
            continue
        tails[rel(log)] = "\n".join(lines)[-TAIL_CHARS:]
    return tails


class Outbox:
    def __init__(self, ctx: Context, out: Path | None, **meta):
        self.ctx, self.out = ctx, out
        self.record = {"command": ctx.command, "device": ctx.label, "commit": ctx.commit, "tiny": ctx.tiny,
                       "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget_s": ctx.budget_s, **meta,
                       "finished": False, "steps": {}, "left_out_of_archive": []}
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)

    def step_done(self, name: str, result: dict) -> None:
        self.record["steps"][name] = result
        self.flush()

    def finish(self, stopped: str | None = None) -> None:
        """The call's end: reached (`finished`), or cut short by `stopped`."""
        self.record.update(finished=stopped is None, seconds=time.monotonic() - self.ctx.started)
        if stopped:
            self.record["stopped"] = stopped
        self.flush()

    def flush(self) -> None:
        text = json.dumps(self.record, indent=1, default=str)
        (self.ctx.folder / "result.json").write_text(text)
        table = summary.write(self.ctx.results)
        if self.out is None:
            return
        self._pack()
        (self.out / f"{self.ctx.command}.json").write_text(json.dumps(self.record, indent=1, default=str))
        (self.out / "summary.md").write_text(table)

    def _pack(self) -> None:
        left_out = self.record["left_out_of_archive"]

        def small(info):  # the tool brings back files of at most 16 MiB: no one file may swamp the archive
            if info.size > MAX_ARCHIVED_BYTES:
                entry = f"{info.name} ({info.size} bytes)"
                left_out.extend([] if entry in left_out else [entry])
                return None
            return info
        archive = self.out / f"{self.ctx.command}.tar.gz"
        partial = archive.with_name(archive.name + ".part")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(self.ctx.folder, arcname=self.ctx.command, filter=small)
        os.replace(partial, archive)

