"""Sizes that cannot fit are refused with the estimate at the config check, before any data is
read or memory allocated (trainer/models/sizes.py)."""
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.models.sizes import COPIES, check_model_size, device_memory, least_model_bytes
from tests.helpers import launch, refusal


def test_the_bound_counts_hidden_and_class_weights_four_times():
    assert least_model_bytes(256, 47, 3) == COPIES * (256 * 256 + 256 * 47)
    assert least_model_bytes(10**9, 47, 1) == 0  # one layer: no hidden width at all


@pytest.mark.parametrize("override, words", [
    ("model.hidden=1000000000", "model.hidden=1000000000 with 47 classes and 3 layers needs at least"),
    ("data.num_classes=1000000000000", "with 1000000000000 classes and 3 layers needs at least 3,814,697.3 GiB"),
])
def test_an_impossible_size_is_refused_with_the_estimate(tmp_path, override, words):
    message = refusal("data=synthetic", f"data.root={tmp_path / 'data'}", f"run.out_dir={tmp_path / 'run'}",
                      "run.device=cpu", override)
    assert words in message and "lower model.hidden" in message, message


def test_a_size_that_fits_passes():
    check_model_size(256, 47, 3, torch.device("cpu"))
    with pytest.raises(ConveyorError, match="at least 2 classes"):
        check_model_size(device_memory(torch.device("cpu")) // 16, None, 3, torch.device("cpu"))


def test_launch_with_a_huge_hidden_exits_2_before_any_work(tmp_path):
    out, data = tmp_path / "run", tmp_path / "data"
    result = launch("data=synthetic", f"data.root={data}", f"run.out_dir={out}", "model.hidden=1000000000")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "GiB for the model's weights" in result.stderr and not data.exists()
