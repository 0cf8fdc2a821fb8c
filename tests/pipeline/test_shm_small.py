"""A small /dev/shm (Docker's default is 64 MB) ends the async pipeline in one paragraph naming
`pipeline=serial` and `--shm-size`, before a batch is drawn: for the command, and for an async
`conveyor.NeighborLoader` (at its first batch, never `OSError: [Errno 28]`), also when /dev/shm is
full to the last byte (the queues' semaphores) and when a sampler of the user's own, whose batches
cannot be bounded ahead, fills it (torch's "unable to allocate shared memory" in a stage).
`pipeline=serial` needs none and trains. Each runs in a private mount namespace over a tmpfs of
its own (`unshare -m`, as root); elsewhere the module is skipped."""
import sys
import textwrap

import pytest

from tests.helpers import in_small_shm, shm_namespaces_allowed

pytestmark = pytest.mark.skipif(not shm_namespaces_allowed(),
                                reason="needs root and unshare -m (a private mount namespace)")

LOADER = textwrap.dedent("""
    import sys
    from conveyor import ConveyorError, NeighborLoader
    from conveyor.partition.datasets import load_dataset
    from tests.helpers import NoFanouts, fill_shm
    graph = load_dataset("synthetic", root=sys.argv[1], scale=0.002, seed=0)  # x: 1.9 MiB, file-mapped
    for case, pipeline, sampler in [("small", "async", "bsp"), ("own", "async", NoFanouts(graph)),
                                    ("full", "async", "bsp"), ("full", "serial", "bsp")]:
        if case == "full":
            fill_shm()
        loader = NeighborLoader(graph, [10, 5], batch_size=512, pipeline=pipeline, node_sampler=sampler)
        try:
            print(case, pipeline, "batches", sum(1 for _ in loader))
        except ConveyorError as error:
            print(case, pipeline, "PARAGRAPH", error)
        finally:
            loader.close()
""")


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
