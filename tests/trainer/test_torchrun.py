"""Data-parallel training as two machines would run it: two torchrun agents on 127.0.0.1 (c10d
rendezvous, one gloo rank each) train the same model, epoch for epoch, as `run.world_size=2`
spawning both ranks on one machine. Each agent's rank reads its own self-reliant partition, part
RANK of the partitioning its machine's first rank made or found (docs/distributed.md)."""
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conveyor.trainer.distributed.ranks import train_distributed
from tests.helpers import REPO, make_config

RUN = ["data=cora", "run.device=cpu", "trainer.epochs=2", "trainer.batch_size=32", "run.seed=0",
       "trainer.progress=false"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def agent(port: int, root: Path, out_dir: Path, log: Path, core: int) -> subprocess.Popen:
    """One torchrun agent, as on one machine of two: the rendezvous at 127.0.0.1:port, on its own
    `core` (each rank then trains with one torch thread, as each of the spawned run's two ranks on
    this machine does: another thread count sums in another order, and Adam moves the weights
    apart)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "two-agents",
               "--local-addr", "127.0.0.1", str(REPO / "launch.py"), *RUN, f"data.root={root}",
               f"run.out_dir={out_dir}"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cores = sorted(os.sched_getaffinity(0))
    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, cwd=REPO,
                            preexec_fn=lambda: os.sched_setaffinity(0, {cores[core % len(cores)]}))


def test_two_torchrun_agents_train_as_one_machine_with_two_ranks(data_root, tmp_path):
    root = tmp_path / "data"  # partitions of its own: both agents make them at once, in one folder
    root.mkdir()
    (root / "Cora").symlink_to(data_root / "Cora")
    port, logs = free_port(), [tmp_path / f"agent{i}.log" for i in range(2)]
    agents = [agent(port, root, tmp_path / "torchrun", log, core) for core, log in enumerate(logs)]
    try:
        codes = [a.wait(timeout=500) for a in agents]
    finally:
        for a in agents:
            a.kill()
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs)
    text = "".join(log.read_text() for log in logs)
    assert "rank 0/2 on cpu: Graph(cora-part0:" in text  # rank 0 read part 0 (the other logs only warnings)

    train_distributed(make_config(*RUN, f"data.root={root}", f"run.out_dir={tmp_path / 'spawned'}",
                                  "run.world_size=2"))
    runs = {name: json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("torchrun", "spawned")}
    by_agents, spawned = ([e["loss"] for e in runs[n]["epochs"]] for n in ("torchrun", "spawned"))
    assert len(by_agents) == 2 and by_agents == pytest.approx(spawned, rel=1e-6), (by_agents, spawned)
    assert runs["torchrun"]["final"]["test_acc"] == pytest.approx(runs["spawned"]["final"]["test_acc"], abs=1e-3)
    weights = [torch.load(tmp_path / n / "checkpoints" / "last.pt", weights_only=True)["model"]
               for n in ("torchrun", "spawned")]
    for key, value in weights[0].items():
        assert torch.allclose(value, weights[1][key], atol=1e-5), key
