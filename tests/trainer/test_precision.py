"""`trainer.precision`: bf16-mixed (autocast, which runs on CPU) trains to the accuracy of float32."""
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.trainer.loop.precision import resolve_precision
from conveyor.trainer.run import train
from tests.helpers import make_config


def test_auto_is_tf32_on_cuda_and_32_on_cpu():
    assert resolve_precision("auto", torch.device("cpu")).name == "32"
    if torch.cuda.is_available():
        assert resolve_precision("auto", torch.device("cuda")).name == "tf32"
    assert resolve_precision(32, torch.device("cpu")).name == "32"  # an int from the command line
    with pytest.raises(ConveyorError, match="trainer.precision must be one of"):
        resolve_precision("fp16", torch.device("cpu"))


def test_bf16_autocast_runs_the_products_in_bf16():
    with resolve_precision("bf16-mixed", torch.device("cpu")).autocast():
        product = torch.ones(4, 4) @ torch.ones(4, 4)
    with resolve_precision("32", torch.device("cpu")).autocast():
        full = torch.ones(4, 4) @ torch.ones(4, 4)
    assert product.dtype == torch.bfloat16 and full.dtype == torch.float32


@pytest.mark.parametrize("data", [
    ("data=cora",),  # 50 epochs, as shipped
    ("data=synthetic", "data.scale=0.005", "pipeline=serial", "trainer.eval_every=10"),  # 10 epochs
], ids=["cora", "synthetic"])
def test_bf16_mixed_is_within_one_point_of_32(tmp_path, data_root, data):
    finals = {}
    for precision in ("32", "bf16-mixed"):
        cfg = make_config(*data, f"data.root={data_root}", f"trainer.precision={precision}",
                          f"run.out_dir={tmp_path / precision}")
        finals[precision] = train(cfg).final
    full, mixed = finals["32"], finals["bf16-mixed"]
    assert mixed["loss"] != full["loss"]  # bf16 did run
    assert abs(mixed["test_acc"] - full["test_acc"]) <= 0.01, (full["test_acc"], mixed["test_acc"])
    assert abs(mixed["best_val_acc"] - full["best_val_acc"]) <= 0.01
