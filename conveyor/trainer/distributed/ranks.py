"""Data-parallel training on K ranks with torch.distributed's DistributedDataParallel (PaGraph §3.2).

Each rank trains one model replica on its own self-reliant partition: it samples, gathers and
shuffles only its own training nodes (PaGraph's local shuffling), and DDP all-reduces the
gradients in every backward pass. All ranks run the same number of batches per epoch, so the
all-reduce never waits on a rank that has run out of seeds.

Two ways in, both through `train_distributed(settings)`:
- `python launch.py run.world_size=K`: this process (its settings checked at the entry point)
  makes (or reuses) the K partitions, spawns K ranks on this machine (rank i on cuda:i with NCCL,
  or on the CPU with gloo) and watches them: when one fails, it stops the others and raises with
  that rank's traceback.
- `torchrun ... launch.py`: torchrun started this process as one rank; RANK, WORLD_SIZE,
  LOCAL_RANK and MASTER_ADDR/PORT come from its environment. torchrun's agents watch their own
  machine's ranks; watch.py makes a rank that dies, anywhere, stop the others within a minute, in
  one paragraph naming it.

In the ranks, `trainer.run.train(settings, ctx)` runs the usual loop; `RankContext` is all it needs
to know about the others: DDP wrapping, the rank's seed batches, and the reductions that make rank 0
report global figures. Only rank 0 writes metrics.json, TensorBoard, run.log and checkpoints.
"""
from __future__ import annotations

import datetime
import json
import logging
import multiprocessing.connection
import os
import signal
import socket
import sys
import tempfile
import traceback
from pathlib import Path
from typing import List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from conveyor.core import ConveyorError
from conveyor.core.cores import usable_cores
from conveyor.core.device import resolve_device
from conveyor.partition.configured import make_partitions
from conveyor.partition.datasets import load_configured
from conveyor.partition.store import load_part
from conveyor.pipeline.shutdown import stop_processes
from conveyor.trainer.distributed.rank_context import RankContext, RankDied, RankFailed, num_batches_per_epoch
from conveyor.trainer.distributed.watch import RankWatch, die_with_agent, error_file
from conveyor.trainer.loop.interrupts import STOP_SIGNALS
from conveyor.trainer.outputs.checkpoint import prepare_out_dir
from conveyor.trainer.outputs.leftovers import RANK_NOTES_PREFIX
from conveyor.trainer.outputs.metrics import setup_logging
from conveyor.trainer.run import train
from conveyor.trainer.settings import TrainingSettings

log = logging.getLogger("conveyor")
PARTITION_TIMEOUT_S = 4 * 3600  # under torchrun, how long ranks wait for the partitioning rank
TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
_PROCESS_GROUPS = []  # kept alive until the process ends (see join_group)



def rank_device(settings, local_rank: int, local_world_size: int) -> torch.device:
    """cuda:<local rank> when training on GPUs (one GPU per rank), else the CPU."""
    device = resolve_device(settings.run.device)
    if device.type != "cuda":
        return device
    if device.index is not None:
        raise ConveyorError(f"run.device={settings.run.device} names one GPU, but with several ranks "
                            f"rank i uses cuda:i; use run.device=cuda (or auto), and "
                            f"CUDA_VISIBLE_DEVICES to choose the GPUs.")
    if local_world_size > torch.cuda.device_count():
        raise ConveyorError(f"{local_world_size} ranks on this machine but only "
                            f"{torch.cuda.device_count()} CUDA devices are visible, and each rank "
                            f"needs its own GPU: lower run.world_size (or torchrun's "
                            f"--nproc-per-node), or train on the CPU with run.device=cpu.")
    return torch.device("cuda", local_rank)


def join_group(settings, rank: int, world_size: int, local_rank: int, local_world_size: int) -> torch.device:
    """Join the process group (MASTER_ADDR/PORT from the environment); return this rank's device."""
    device = rank_device(settings, local_rank, local_world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # The ranks on one machine share the cores this process may run on (its affinity: a container's
    # or taskset's cores, not the machine's); more threads than cores each would thrash.
    torch.set_num_threads(max(1, len(usable_cores()) // local_world_size))
    timeout = datetime.timedelta(seconds=float(settings.run.dist_timeout_s))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=rank,
                            world_size=world_size, timeout=timeout)
    # DDP's reducer must never hold the last reference to the process group: freeing the group
    # there joins gloo's threads with the GIL held, while a thread that has just finished the
    # last all-reduce may still need the GIL to release its tensors, and the rank never exits.
    _PROCESS_GROUPS.append(dist.group.WORLD)
    if rank == 0:  # rank 0 logs for everyone; the others speak only when something is wrong
        setup_logging(Path(settings.run.out_dir))
    else:
        quiet_logging(rank)
    return device


def quiet_logging(rank: int) -> None:
    root = logging.getLogger("conveyor")
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"[rank {rank}] %(message)s"))
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    root.propagate = False


def rank_context(settings, rank: int, world_size: int, device: torch.device, part_dir: Path) -> RankContext:
    """Load this rank's partition and agree with the others on the batches per epoch."""
    part = load_part(part_dir, rank)
    counts = [None] * world_size
    dist.all_gather_object(counts, int(part.graph.train_idx.numel()))
    num_batches = num_batches_per_epoch(counts, settings.trainer.batch_size)
    log.info("rank %d/%d on %s: %r, %d training nodes, %d batches per epoch", rank, world_size,
             device, part.graph, counts[rank], num_batches)
    return RankContext(rank, world_size, device, part.graph, part.node_ids, num_batches, part.info)


def link_rank_context(settings, rank: int, world_size: int, device: torch.device) -> RankContext:
    """task=link: every rank holds the whole graph (memory-mapped where it is a saved graph.pt) and
    trains its own share of the training links (trainer/link_task.py); no partitioning."""
    graph = load_configured(settings.data)
    log.info("rank %d/%d on %s: %r, link prediction on the whole graph", rank, world_size, device, graph)
    return RankContext(rank, world_size, device, graph, torch.arange(graph.num_nodes), 0, None)


def run_rank(settings, rank: int, world_size: int, local_rank: int, local_world_size: int,
             part_dir: Optional[Path] = None, after=None, joined=None) -> dict:
    """One rank's whole run: join, find its partition, train, leave. Without `part_dir`
    (torchrun), the first rank of each machine makes or finds the partitions while the others
    wait. `after(ctx, final)`, if given, sees the rank once it has trained (tests use it);
    `joined()`, once the rank is in its process group (torchrun's watch.py)."""
    device = join_group(settings, rank, world_size, local_rank, local_world_size)
    if joined is not None:
        joined()
    try:
        if settings.task.name == "link":
            ctx = link_rank_context(settings, rank, world_size, device)
        else:
            if part_dir is None:
                part_dir = _partitions_from_local_leader(settings, rank, world_size, local_rank)
            ctx = rank_context(settings, rank, world_size, device, part_dir)
        final = train(settings, ctx).final
        if after is not None:
            after(ctx, final)
        return final
    finally:
        dist.destroy_process_group()


def make_partitions_for(settings: TrainingSettings, world_size: int):
    """The run's partitions (made, or found where `conveyor partition` put them)."""
    return make_partitions(settings.data, settings.partition, len(settings.sampler.fanouts), world_size)


def _partitions_from_local_leader(settings, rank: int, world_size: int, local_rank: int) -> Path:
    # Partitioning a large graph can take far longer than a collective may hang, so the wait
    # happens on a side group with its own timeout.
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=PARTITION_TIMEOUT_S))
    mine = str(make_partitions_for(settings, world_size)[0]) if local_rank == 0 else None
    dirs = [None] * world_size
    dist.all_gather_object(dirs, mine, group=group)
    dist.destroy_process_group(group)
    return Path(dirs[rank - local_rank])  # torchrun numbers each machine's ranks consecutively


# -- spawning and watching K ranks on this machine -----------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spawned_rank(rank: int, settings, world_size: int, port: int, part_dir: str, notes: str, after) -> None:
    """A child process's whole life. A failed rank leaves its error in `notes/rank<r>.json` for
    the parent and leaves with os._exit: its interpreter teardown could wait on peers or on
    process-group threads that will never answer."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        run_rank(settings, rank, world_size, rank, world_size, Path(part_dir) if part_dir else None, after)
        return
    except ConveyorError as error:  # bad input: the parent raises it as such, without traceback
        code, note = 2, {"input": str(error)}
    except BaseException:
        code, note = 1, {"traceback": traceback.format_exc()}
    tmp = Path(notes) / f".rank{rank}.json"
    tmp.write_text(json.dumps(note))
    os.replace(tmp, Path(notes) / f"rank{rank}.json")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def spawn_ranks(settings, world_size: int, part_dir: Path, after=None) -> None:
    """Run `world_size` ranks as child processes and watch them: as soon as one exits with an
    error, stop the others and raise with that rank's traceback (or the signal that killed it)."""
    with tempfile.TemporaryDirectory(prefix=f"{RANK_NOTES_PREFIX}{os.getpid()}.") as notes:
        ranks = mp.start_processes(_spawned_rank, (settings, world_size, free_port(), str(part_dir or ""),
                                                   notes, after),
                                   nprocs=world_size, join=False, start_method="spawn")
        try:
            failed = _wait_for_failure(ranks.processes)
            if failed:
                _stop(ranks.processes)
                raise _failure(ranks.processes, failed, Path(notes))
        finally:
            _stop(ranks.processes)  # only still running if this process was interrupted


def _wait_for_failure(procs) -> List[int]:
    """Block until all ranks exited cleanly (returns []) or some failed (returns their ranks)."""
    pending = {p.sentinel: i for i, p in enumerate(procs)}
    while pending:
        ready = [pending.pop(s) for s in multiprocessing.connection.wait(list(pending))]
        for i in ready:
            procs[i].join()  # the sentinel closes a moment before the exit code is known
        failed = [i for i in ready if procs[i].exitcode != 0]
        if failed:
            return failed
    return []


def _stop(procs) -> None:
    """SIGTERM the ranks still running; stop_processes kills those still there after its grace."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    stop_processes(procs)


def _failure(procs, failed: List[int], notes: Path) -> Exception:
    """The error to raise for the rank that failed first: one that died without a note (killed
    by a signal), else the one that wrote its note first (the others usually failed because it
    did, in a collective that lost its peer)."""
    paths = {i: notes / f"rank{i}.json" for i in failed}
    first = min(failed, key=lambda i: paths[i].stat().st_mtime if paths[i].exists() else 0.0)
    proc = procs[first]
    who = f"rank {first} of {len(procs)} (pid {proc.pid})"
    note = json.loads(paths[first].read_text()) if paths[first].exists() else {}
    if "input" in note:  # a ConveyorError: launch.py prints it plainly
        return ConveyorError(f"{who}: {note['input']}")
    if "traceback" in note:
        return RankFailed(f"{who} failed, so the other ranks were stopped. Its traceback:\n"
                          f"{note['traceback']}")
    code = proc.exitcode
    how = (f"was killed by signal {signal.Signals(-code).name}" if code < 0 else
           f"exited with code {code} (its own output above says why)")
    return RankDied(f"{who} {how}, so the other ranks were stopped.")


# -- entry point ---------------------------------------------------------------------------------

def torchrun_env() -> Optional[dict]:
    """RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE when torchrun started this process."""
    if not all(v in os.environ for v in TORCHRUN_VARS):
        return None
    world = int(os.environ["WORLD_SIZE"])
    return {"rank": int(os.environ["RANK"]), "world_size": world,
            "local_rank": int(os.environ["LOCAL_RANK"]),
            "local_world_size": int(os.environ.get("LOCAL_WORLD_SIZE", world))}


def train_distributed(settings: TrainingSettings, after=None) -> dict:
    """Train on run.world_size ranks (or on torchrun's); return rank 0's `final` figures.
    `after(ctx, final)`, a picklable function, runs in every rank once it has trained. The
    settings travel to the ranks as they are (resolved and checked once, at the entry point: a
    default run.out_dir names the same folder on every rank)."""
    env = torchrun_env()
    if env is not None:
        return _train_torchrun(settings, env, after)
    world_size = settings.run.world_size
    rank_device(settings, 0, world_size)  # fail here, not in K children, if the GPUs do not suffice
    prepare_out_dir(settings)  # the check rank 0 makes again: never overwrite a run without resume
    setup_logging(Path(settings.run.out_dir))
    part_dir = None if settings.task.name == "link" else make_partitions_for(settings, world_size)[0]
    spawn_ranks(settings, world_size, part_dir, after)
    # The ranks were child processes: what rank 0 wrote is how their result comes back.
    return json.loads((Path(settings.run.out_dir) / "metrics.json").read_text())["final"]


def _train_torchrun(settings, env: dict, after=None) -> dict:
    configured = settings.run.world_size
    if configured > 1 and configured != env["world_size"]:
        raise ConveyorError(f"run.world_size={configured} but torchrun started "
                            f"{env['world_size']} ranks (WORLD_SIZE); leave run.world_size at 1 "
                            f"or make the two agree.")
    die_with_agent()  # a killed agent takes this rank along, as a lost machine would
    watched: dict = {}

    def joined():
        watched["watch"] = RankWatch(env["rank"], env["world_size"], resume_hint(settings))
    try:
        final = run_rank(settings, env["rank"], env["world_size"], env["local_rank"], env["local_world_size"],
                         None, after, joined)
    except ConveyorError as error:  # bad input: the paragraph as torchrun's summary quotes it, too
        _failed(watched.get("watch"), str(error))
        raise
    except KeyboardInterrupt:  # SIGTERM from this rank's agent, which a dead rank's may have caused
        _explain(watched.get("watch"))
        raise
    except Exception as error:
        _explain_or_record(watched.get("watch"), error)
        raise
    if "watch" in watched:
        watched["watch"].close()
    return final


def _failed(watch: Optional[RankWatch], paragraph: str) -> None:
    if watch is not None:
        watch.report(paragraph)
        watch.close(finished=False)
    error_file(paragraph)


def _explain(watch: Optional[RankWatch]) -> None:
    """Another rank died (or the store's agent ended): the paragraph naming it, and this rank ends
    (watch.py). Else back to the caller. The agent's SIGTERM, which a dead rank brings a moment
    later, waits meanwhile instead of cutting the explanation short (and then stops the run)."""
    if watch is None:
        return
    held = []
    saved = {sig: signal.signal(sig, lambda signum, frame: held.append(signum)) for sig in STOP_SIGNALS}
    try:
        paragraph = watch.explain()
        if paragraph is not None:
            watch.stop(paragraph)
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    if held:
        raise KeyboardInterrupt(signal.Signals(held[0]).name)


def _explain_or_record(watch: Optional[RankWatch], error: Exception) -> None:
    """A collective that failed because another rank died: the paragraph naming it, and this rank
    ends (watch.py). Otherwise the failure is this rank's own: its traceback goes into torchrun's
    error file, as torchrun's `record` writes it, and on."""
    _explain(watch)
    if watch is not None:
        watch.report(f"{type(error).__name__}: {error}")
        watch.close(finished=False)
    from torch.distributed.elastic.multiprocessing.errors import ErrorHandler
    ErrorHandler().record_exception(error)


def resume_hint(settings) -> str:
    return (f"The checkpoints so far are in {settings.run.out_dir}: run the same command with "
            f"run.resume=true to go on from the last finished epoch.")
