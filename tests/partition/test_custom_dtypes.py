"""Custom arrays of any real dtype in either byte order are converted exactly; any other dtype
(complex, strings, records, dates, sparse, meta or quantized tensors) is refused in one paragraph
naming the file, the dtype and what is accepted (partition/datasets/dtypes.py)."""
import warnings

import numpy as np
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import load_dataset
from tests.helpers import launch, write_custom

N = 30
REAL = ["float16", "float32", "float64", ">f4", ">f8", "longdouble", "int8", "int16", "int32",
        "int64", ">i4", ">i8", "uint8", "uint16", "uint32", "uint64", ">u2", ">u8", "bool"]
INTEGER = [d for d in REAL if np.dtype(d).kind in "iu"]


def save_graph(folder, **replace):
    rng = np.random.default_rng(0)
    return write_custom(folder, **{"edge_index": rng.integers(0, N, (2, 90)), "x": rng.integers(0, 2, (N, 4)),
                                   "y": np.arange(N) % 3, "train_idx": np.arange(20), **replace})


@pytest.mark.parametrize("dtype", REAL)
def test_features_of_every_real_dtype_are_converted_exactly(tmp_path, dtype):
    x = (np.arange(N * 4).reshape(N, 4) % 2).astype(dtype)  # 0/1: exact in every dtype
    graph = load_dataset("custom", root=None, path=save_graph(tmp_path / "g", x=x))
    assert graph.x.dtype == torch.float32
    assert torch.equal(graph.x, torch.from_numpy(x.astype(np.float32)))


@pytest.mark.parametrize("dtype", INTEGER)
def test_ids_and_labels_of_every_integer_dtype(tmp_path, dtype):
    edges = np.array([[0, 1, 2, 28], [1, 2, 3, 29]], dtype=dtype)
    y = (np.arange(N) % 3).astype(dtype)
    graph = load_dataset("custom", root=None, path=save_graph(tmp_path / "g", edge_index=edges, y=y,
                                                              train_idx=np.arange(20).astype(dtype)))
    assert graph.y.tolist() == (np.arange(N) % 3).tolist() and graph.num_classes == 3
    assert graph.train_idx.tolist() == list(range(20)) and graph.num_edges == 4


def quantized():
    with warnings.catch_warnings():  # deprecated by torch, still loadable: must be refused
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.rand(N, 4), 0.1, 0, torch.quint8)


REFUSED = {
    "complex64": (np.ones((N, 4), np.complex64), "complex64"),
    "complex128": (np.ones((N, 4), np.complex128), "complex128"),
    "str": (np.full((N, 4), "ab"), "<U2"),
    "bytes": (np.full((N, 4), b"ab"), "|S2"),
    "record": (np.zeros((N, 4), dtype=[("a", "<f4")]), "[('a', '<f4')]"),
    "datetime": (np.zeros((N, 4), dtype="datetime64[s]"), "datetime64[s]"),
    "sparse": (torch.eye(N, 4).to_sparse(), "sparse_coo tensor of torch.float32"),
    "meta": (torch.empty(N, 4, device="meta"), "meta tensor of torch.float32"),
    "quantized": (quantized(), "quantized tensor of torch.quint8"),
    "complex tensor": (torch.ones(N, 4, dtype=torch.complex64), "torch.complex64"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_dtype_that_is_no_real_number_is_refused_naming_it(tmp_path, case):
    value, shown = REFUSED[case]
    folder = save_graph(tmp_path / "g", x=value)
    file = folder / ("x.pt" if isinstance(value, torch.Tensor) else "x.npy")
    with pytest.raises(ConveyorError) as err:
        load_dataset("custom", root=None, path=folder)
    message = str(err.value)
    assert f"{file} holds" in message and shown in message and "uint8..uint64" in message, message


def test_uint64_ids_beyond_int64_are_refused_not_wrapped(tmp_path):
    edges = np.array([[0, 2**63 + 5], [1, 2]], dtype=np.uint64)
    with pytest.raises(ConveyorError, match="beyond int64's range"):
        load_dataset("custom", root=None, path=save_graph(tmp_path / "g", edge_index=edges))
    edges = torch.tensor([[0, 2**63 + 5], [1, 2]], dtype=torch.uint64)
    with pytest.raises(ConveyorError, match="beyond int64's range"):
        load_dataset("custom", root=None, path=save_graph(tmp_path / "h", edge_index=edges))


def test_launch_with_complex_features_exits_2_before_training(tmp_path):
    folder = save_graph(tmp_path / "g", x=np.ones((N, 4), np.complex64))
    out = tmp_path / "run"
    result = launch("data=custom", f"data.path={folder}", f"run.out_dir={out}", "pipeline=serial")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "complex64" in result.stderr and not (out / "checkpoints").exists()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.int8,
                                   torch.uint16, torch.uint32, torch.uint64, torch.bool])
def test_pt_tensors_of_every_real_dtype_are_converted_exactly(tmp_path, dtype):
    x = torch.arange(N * 4).view(N, 4) % 2
    ids = torch.arange(20).to(dtype) if dtype in (torch.int8, torch.uint16, torch.uint32, torch.uint64) else None
    folder = save_graph(tmp_path / "g", x=x.to(dtype), **({} if ids is None else {"train_idx": ids}))
    graph = load_dataset("custom", root=None, path=folder)
    assert torch.equal(graph.x, x.float()) and graph.train_idx.tolist() == list(range(20))
