"""`pipeline=async` on CUDA: batches cross the stage processes by CUDA IPC (recycled device
buffers), and training must see the same batches as `pipeline=serial` on the same device.

Losses are compared with a tolerance: PyG's scatter on CUDA adds with atomics, so the sums of a
layer are not bit-reproducible from run to run; the batches themselves (sampled edges, cache
counts) must be identical. Run by the GPU validation suite (`python -m benchmarks.gpu.device check`: pytest -m gpu).
"""
import pytest
import torch

from tests.helpers import train_both

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.mark.parametrize("sampler", ["bsp", "fused"])
def test_async_training_on_cuda_equals_serial(tmp_path, data_root, sampler):
    serial, piped = train_both(tmp_path, "run.device=cuda", f"sampler={sampler}", "data=synthetic",
                               "data.scale=0.005", f"data.root={data_root}", "trainer.epochs=2",
                               "trainer.batch_size=128", "sampler.fanouts=[10,5]", "model.hidden=64",
                               "trainer.eval_every=2", "cache=degree", "cache.capacity=0.3")
    (s_metrics, s_losses, _, _), (a_metrics, a_losses, a_tags, _) = serial, piped
    assert len(a_losses) == len(s_losses) > 0
    assert a_losses == pytest.approx(s_losses, rel=1e-3, abs=1e-4)
    for s, a in zip(s_metrics["epochs"], a_metrics["epochs"], strict=True):
        for key in ("sampled_edges", "cache_hit_ratio", "bytes_from_host"):
            assert a.get(key) == s.get(key), key
    assert a_metrics["final"]["test_acc"] == pytest.approx(s_metrics["final"]["test_acc"], abs=0.01)
    assert "pipeline/ipc_ms" in a_tags
