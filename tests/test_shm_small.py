"""A small /dev/shm (Docker's default is 64 MB) ends the async pipeline in one paragraph naming
`pipeline=serial` and `--shm-size`, before a batch is drawn: for the command, and for an async
`conveyor.NeighborLoader` (at its first batch, never `OSError: [Errno 28]`), also when /dev/shm is
full to the last byte (the queues' semaphores) and when a sampler of the user's own, whose batches
cannot be bounded ahead, fills it (torch's "unable to allocate shared memory" in a stage).
`pipeline=serial` needs none and trains. Each runs in a private mount namespace over a tmpfs of
its own (`unshare -m`, as root); elsewhere the module is skipped."""
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers import REPO

SMALL = "8m"


def in_small_shm(command: str, size: str = SMALL, timeout: int = 180) -> subprocess.CompletedProcess:
    """`command` (a shell line) in a mount namespace whose /dev/shm is a tmpfs of `size`."""
    prepare = f"mount -t tmpfs -o size={size} tmpfs /dev/shm"
    return subprocess.run(["unshare", "-m", "sh", "-c", f"{prepare} && {command}"], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _namespaces_allowed() -> bool:
    try:
        return in_small_shm("df -B1 --output=size /dev/shm | tail -1", timeout=20).stdout.strip() == str(8 << 20)
    except (OSError, subprocess.SubprocessError):
        return False


pytestmark = pytest.mark.skipif(not _namespaces_allowed(),
                                reason="needs root and unshare -m (a private mount namespace)")

LOADER = textwrap.dedent("""
    import sys
    from conveyor import ConveyorError, NeighborLoader
    from conveyor.partition.datasets import load_dataset
    from tests.test_shm_small import NoFanouts, fill_shm
    graph = load_dataset("synthetic", root=sys.argv[1], scale=0.002, seed=0)  # x: 1.9 MiB, file-mapped
    for case, pipeline, sampler in [("small", "async", "bsp"), ("own", "async", NoFanouts(graph)),
                                    ("full", "async", "bsp"), ("full", "serial", "bsp")]:
        if case == "full":
            fill_shm()
        loader = NeighborLoader(graph, [10, 5], batch_size=512, pipeline=pipeline, sampler=sampler)
        try:
            print(case, pipeline, "batches", sum(1 for _ in loader))
        except ConveyorError as error:
            print(case, pipeline, "PARAGRAPH", error)
        finally:
            loader.close()
""")


def fill_shm() -> None:
    """Fill /dev/shm to its last byte."""
    with open("/dev/shm/filler", "wb") as filler:
        try:
            while True:
                filler.write(bytes(1 << 16))
                filler.flush()
        except OSError:
            pass


class NoFanouts:
    """bsp drawing every in-neighbour at two hops, without saying its fanouts: the pipeline cannot
    bound its batches ahead (a sampler of the user's own), so a stage's slot meets the full /dev/shm."""

    def __init__(self, graph):
        from conveyor.samplers import build_sampler
        self.inner = build_sampler("bsp", graph, [-1, -1])

    def sample(self, seeds):
        return self.inner.sample(seeds)


def test_an_async_loader_in_a_small_shm_gets_the_paragraph_at_its_first_batch(data_root, synthetic_small):
    script = LOADER.replace('"', '\\"')
    result = in_small_shm(f'{sys.executable} -c "{script}" {data_root}')
    out = result.stdout + result.stderr
    assert "Traceback" not in out and "Errno 28" not in out and result.returncode == 0, out[-3000:]
    lines = dict(line.split(" PARAGRAPH ", 1) if " PARAGRAPH " in line else (line, "")
                 for line in result.stdout.splitlines())
    assert set(lines) == {"small async", "own async", "full async", "full serial batches 10"}, result.stdout
    expected = {"small async": "the slots of both queues (6 + 12) for batches of 512 seeds",  # bounded ahead
                "own async": "ran out of shared memory",  # a stage's slot, in torch's words, made the paragraph
                "full async": "semaphores"}  # the first thing the pipeline places there
    for case, words in expected.items():
        for word in ("pipeline=serial", "--shm-size=", words):
            assert word in lines[case], (case, word, lines[case])


def test_the_command_refuses_before_training_and_serial_trains(data_root, tmp_path):
    base = (f"{sys.executable} launch.py data=cora data.root={data_root} run.device=cpu trainer.epochs=1 "
            f"trainer.progress=false")
    result = in_small_shm(f"{base} pipeline=async run.out_dir={tmp_path / 'async'}; echo EXIT $?; "
                          f"{base} pipeline=serial run.out_dir={tmp_path / 'serial'}; echo EXIT $?")
    assert "Traceback" not in result.stderr and "unable to allocate" not in result.stderr, result.stderr[-3000:]
    refused = next(line for line in result.stderr.splitlines() if line.startswith("conveyor: error:"))
    assert "pipeline=serial" in refused and "--shm-size=" in refused and "/dev/shm has" in refused
    assert result.stdout.split() == ["EXIT", "2", "EXIT", "0"], result.stdout
    assert not (tmp_path / "async" / "metrics.json").exists()  # no epoch ran
    assert (tmp_path / "serial" / "metrics.json").exists()
