"""A generated sweep over every custom file x dtype x shape x file kind (regular, FIFO, link to
/dev/zero, empty, truncated): each outcome is a correct load (the values exactly as given, of a
dtype that file may hold) or one paragraph (a ConveyorError, no newline) -- never another
exception, a hang (the timeout) or a silent coercion. Called in-process for speed; a few real
command-line runs check the exit code 2."""
import os

import numpy as np
import pytest
import torch

from conveyor.core import ConveyorError
from conveyor.partition import load_dataset
from tests.helpers import launch

pytestmark = pytest.mark.timeout(60)
N = 30
DTYPES = ["float16", ">f8", "int8", ">i4", "uint64", "bool", "complex64", "<U2", "object"]
SHAPES = {"edge_index": [(2, 40), (40, 2), (2, 0), (3, 40)], "x": [(N, 4), (N,), (N, 0), (N, 1, 2)],
          "y": [(N,), (N, 1), (0,)], "train_idx": [(20,), (N,), (2, 10)], "val_idx": [(5,), (N,), ()],
          "test_idx": [(5,), (0,), (5, 1)]}
ALLOWED = {"edge_index": "iu", "x": "fiub", "y": "iu", "train_idx": "iub", "val_idx": "iub", "test_idx": "iub"}
KINDS = ["fifo", "devzero", "empty", "truncated"]


def valid_graph():
    ids = np.arange(N)
    return {"edge_index": np.stack([ids[:-1], ids[1:]]), "x": (ids[:, None] % 2 * np.ones(4)).astype(np.float32),
            "y": ids % 3, "train_idx": ids[:20], "val_idx": ids[20:25], "test_idx": ids[25:]}


def value_of(name, dtype, shape):
    """Integers valid for `name` (node ids, labels 0..2, a mask), in `dtype` and `shape`."""
    count = int(np.prod(shape)) if shape else 1
    base = np.arange(count) % 3 if name in ("y", "x") else np.arange(count) % N
    if name == "train_idx" and shape == (N,):
        base = np.arange(N) < 20  # a mask
    if np.dtype(dtype).kind in "UO":
        return base.astype(str).astype(dtype).reshape(shape)
    return base.astype(dtype).reshape(shape)


def save(folder, arrays):
    folder.mkdir()
    for name, value in arrays.items():
        np.save(folder / f"{name}.npy", value, allow_pickle=value.dtype.kind == "O")
    return folder


def outcome(folder, name, value):
    """Load; on success the file's values must come back exactly, from an allowed dtype."""
    try:
        graph = load_dataset("custom", root=None, path=folder)
    except ConveyorError as error:
        assert "\n" not in str(error) and str(error).strip(), repr(str(error))
        return "refused"
    assert value is None or value.dtype.kind in ALLOWED[name], f"{name} of {value.dtype} taken"
    if value is not None and name == "x":
        assert torch.equal(graph.x, torch.from_numpy(value.astype(np.float32)).reshape(N, -1))
    if value is not None and name in ("y", "train_idx") and value.dtype != bool:
        assert getattr(graph, name).tolist() == value.astype(np.int64).reshape(-1).tolist()
    return "loaded"


@pytest.mark.parametrize("name, dtype, shape", [(name, dtype, shape) for name, shapes in SHAPES.items()
                                                 for dtype in DTYPES for shape in shapes])
def test_every_dtype_and_shape(tmp_path, name, dtype, shape):
    value = value_of(name, dtype, shape)
    outcome(save(tmp_path / "g", {**valid_graph(), name: value}), name, value)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("name", list(SHAPES))
def test_every_file_kind(tmp_path, name, kind):
    folder = save(tmp_path / "g", valid_graph())
    path = folder / f"{name}.npy"
    if kind == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    else:
        path.unlink()
        {"fifo": os.mkfifo, "devzero": lambda p: os.symlink("/dev/zero", p),
         "empty": lambda p: p.write_bytes(b"")}[kind](path)
    assert outcome(folder, name, None) == "refused"


@pytest.mark.parametrize("name, kind", [("x", "fifo"), ("y", "devzero"), ("edge_index", "truncated")])
def test_the_command_exits_2_in_one_paragraph(tmp_path, name, kind):
    folder = save(tmp_path / "g", valid_graph())
    path = folder / f"{name}.npy"
    path.unlink() if kind != "truncated" else None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "devzero":
        os.symlink("/dev/zero", path)
    else:
        np.save(path, valid_graph()[name])
        path.write_bytes(path.read_bytes()[:100])
    result = launch("data=custom", f"data.path={folder}", f"run.out_dir={tmp_path / 'run'}", "pipeline=serial")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("conveyor: error:")]
    assert len(errors) == 1 and str(path) in errors[0], result.stderr  # after the start-up line
    assert result.stderr.strip().splitlines()[-1] == errors[0]


def test_the_sweep_loads_as_well_as_refuses(tmp_path):
    """The grid is no blanket refusal: the valid graph, and real dtypes of a valid shape, load."""
    seen = {}
    for index, dtype in enumerate(DTYPES):
        value = value_of("x", dtype, (N, 4))
        seen[dtype] = outcome(save(tmp_path / str(index), {**valid_graph(), "x": value}), "x", value)
    assert seen == {**{d: "loaded" for d in DTYPES[:6]}, **{d: "refused" for d in DTYPES[6:]}}
