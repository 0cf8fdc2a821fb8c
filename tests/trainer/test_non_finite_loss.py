"""#29 item 3: a loss that turns non-finite (trainer.lr=1e30) stops the run at once, in one
paragraph (exit 2), and the last checkpoint written before it keeps finite weights."""
import json

import torch

from tests.helpers import assert_clear_error, launch


def test_a_diverging_run_stops_in_one_paragraph_and_keeps_its_last_good_checkpoint(tmp_path, data_root):
    out = tmp_path / "run"
    # cora's 140 training nodes are one batch: epoch 1's loss is read before its step blows the
    # weights up, epoch 2's is not finite.
    result = launch("data=cora", f"data.root={data_root}", "trainer.epochs=3", "trainer.lr=1e30",
                    "pipeline=serial", f"run.out_dir={out}")
    assert_clear_error(result, "the training loss became nan in epoch 2/3, batches 1-1",
                       "learning rate 1e+30", "smaller trainer.lr")
    assert "epoch 2:" not in result.stderr and "epoch 1:" in result.stderr
    last = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
    assert last["epoch"] == 1
    assert all(torch.isfinite(value).all() for value in last["model"].values() if value.is_floating_point())
    assert [record["epoch"] for record in json.loads((out / "metrics.json").read_text())["epochs"]] == [1]
