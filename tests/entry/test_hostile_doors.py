"""A generated sweep over conveyor's doors with hostile arguments (issue #39): `predict`'s and
`fit`'s arguments, `load`'s crafted module records and files, huge sizes on the command line, in
fit and in a checkpoint, and a small /dev/shm under the async pipeline. Every case ends in a
correct result (checked against a reference computed another way: no silent change) or in one
`ConveyorError` paragraph naming the problem, never in a traceback, a hang (each case has a time
limit) or an OOM kill (the module runs under an address-space limit a few GiB above what it
holds, so a size that escaped its check fails here as an allocation error, not in the kernel).

The cases are rows of tables, generated one argument at a time against an otherwise sound call.
`LOADER_CASES` is the table for `conveyor.NeighborLoader`'s own arguments: extend it with more
`Case(...)`s (a call taking the fixtures, and `correct(check)` or `refused(words...)`), and the
same harness runs them.
"""
from __future__ import annotations

import copy
import json
import os
import resource
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
import torch
from torch_geometric.nn import GraphSAGE

import conveyor
from conveyor.partition import Graph
from conveyor.partition.datasets import load_dataset
from tests.helpers import Case, correct, in_small_shm, make_config, refused, run_case, shm_namespaces_allowed

HEADROOM = 6 << 30  # address space beyond what the test process maps when the sweep starts
CASE_LIMIT_S = 120


# -- fixtures ------------------------------------------------------------------------------------

@pytest.fixture(scope="module", autouse=True)
def address_space_limit():
    """A size that escaped its check fails as an allocation error here, not in the OOM killer."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    mapped = sum(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text().splitlines()
                 if line.startswith("VmSize:"))
    resource.setrlimit(resource.RLIMIT_AS, (mapped + HEADROOM, hard))
    yield
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class Fixtures:
    """What the cases share: cora, a trained GraphSAGE and SampledGNN and their checkpoints, their
    outputs on every node (the reference), a folder for crafted files, a small trainable graph."""

    def __init__(self, data_root: Path, folder: Path):
        self.folder = folder
        self.graph = load_dataset("cora", root=data_root)
        self.data = self.graph.to_data()
        serial = ["pipeline=serial", "trainer.progress=false"]
        pyg = GraphSAGE(self.graph.x.size(1), 16, 2, 7)
        conveyor.fit(self.graph, pyg, epochs=1, fanouts=[5, 5], out_dir=folder / "pyg", overrides=serial)
        conveyor.fit(self.graph, epochs=1, fanouts=[5, 5], out_dir=folder / "own",
                     overrides=[*serial, "model.hidden=16"])
        self.checkpoints = {"pyg": folder / "pyg" / "checkpoints" / "best.pt",
                            "own": folder / "own" / "checkpoints" / "best.pt"}
        self.models = {name: conveyor.load(path) for name, path in self.checkpoints.items()}
        self.full = {name: conveyor.predict(m, self.graph) for name, m in self.models.items()}
        self.small = small_graph()

    def crafted(self, kind: str, name: str, edit: Callable[[dict], Any]) -> Path:
        """The `kind` checkpoint with its state edited by `edit` (in place, or a returned value)."""
        state = torch.load(self.checkpoints[kind], weights_only=True)
        edited = edit(state)
        path = self.folder / "crafted" / f"{kind}-{abs(hash(name))}.pt"
        path.parent.mkdir(exist_ok=True)
        torch.save(state if edited is None else edited, path)
        return path


def small_graph(num_nodes: int = 300) -> Graph:
    g = torch.Generator().manual_seed(0)
    edges = torch.randint(0, num_nodes, (2, 8 * num_nodes), generator=g)
    ids = torch.randperm(num_nodes, generator=g)
    return Graph.from_edge_index(edges, num_nodes, x=torch.randn(num_nodes, 8, generator=g),
                                 y=torch.arange(num_nodes) % 3, train_idx=ids[:150], val_idx=ids[150:220],
                                 test_idx=ids[220:], num_classes=3)


@pytest.fixture(scope="module")
def fx(data_root, tmp_path_factory) -> Fixtures:
    return Fixtures(data_root, tmp_path_factory.mktemp("doors"))


# -- predict -------------------------------------------------------------------------------------

def rows_of(ids_of: Callable, kind: str = "pyg"):
    """A check: the result is the reference's rows `ids_of(fx)`, exactly."""
    def check(result, fx):
        expected = fx.full[kind][ids_of(fx)]
        assert result.shape == expected.shape and torch.allclose(result, expected, atol=1e-5)
    return check


NODES = {  # nodes= value (given the fixtures) -> what predict must do with it
    "every node (None)": (lambda fx: None, correct(rows_of(lambda fx: slice(None)))),
    "a boolean mask (PyG's test_mask)": (lambda fx: fx.data.test_mask,
                                         correct(rows_of(lambda fx: fx.data.test_mask.nonzero().view(-1)))),
    "int64 ids": (lambda fx: torch.tensor([5, 0, 2707]), correct(rows_of(lambda fx: [5, 0, 2707]))),
    "int32 ids": (lambda fx: torch.tensor([5, 9], dtype=torch.int32), correct(rows_of(lambda fx: [5, 9]))),
    "a list": (lambda fx: [3, 1, 3], correct(rows_of(lambda fx: [3, 1, 3]))),
    "one id": (lambda fx: 7, correct(rows_of(lambda fx: [7]))),
    "a numpy array": (lambda fx: fx.data.test_mask.nonzero().view(-1).numpy(),
                      correct(rows_of(lambda fx: fx.data.test_mask.nonzero().view(-1)))),
    "no ids": (lambda fx: torch.tensor([], dtype=torch.long), correct(rows_of(lambda fx: []))),
    "float ids": (lambda fx: torch.tensor([0.0, 1.0]), refused("dtype torch.float32", "boolean mask")),
    "float list": (lambda fx: [0.5, 1.5], refused("dtype torch.float32")),
    "negative ids": (lambda fx: torch.tensor([-1]), refused("node id -1", "ids 0..2707")),
    "ids out of range": (lambda fx: torch.tensor([2708]), refused("node id 2708", "2708 nodes")),
    "a uint8 mask": (lambda fx: fx.data.test_mask.to(torch.uint8), refused("uint8", "mask.bool()")),
    "a short mask": (lambda fx: torch.ones(5, dtype=torch.bool), refused("boolean mask of shape (5,)")),
    "a 2-D id tensor": (lambda fx: torch.zeros(2, 2, dtype=torch.long), refused("shape (2, 2)")),
    "a string": (lambda fx: "test", refused("'test'", "node ids")),
    "a dict": (lambda fx: {"a": 1}, refused("node ids")),
}

KEYWORDS = {  # one keyword of predict at a time, the rest sound
    "batch_size=97": (dict(batch_size=97), correct(rows_of(lambda fx: slice(None)))),
    "batch_size=0": (dict(batch_size=0), refused("batch_size is a whole number >= 1")),
    "batch_size=-3": (dict(batch_size=-3), refused("batch_size=-3")),
    "batch_size=2.5": (dict(batch_size=2.5), refused("batch_size=2.5")),
    "batch_size=True": (dict(batch_size=True), refused("batch_size=True")),
    "layers=1": (dict(layers=1), correct(lambda r, fx: r.shape == (2708, 16) or pytest.fail(str(r.shape)))),
    "layers=0": (dict(layers=0), refused("layers=0")),
    "layers=3": (dict(layers=3), refused("the model has 2 layers")),
    "layers=1.5": (dict(layers=1.5), refused("layers=1.5")),
    "device=cuda without CUDA": (dict(device="cuda"), refused("device=cuda", "no CUDA device")),
    "device=tpu": (dict(device="tpu"), refused("auto, cpu, cuda or cuda:N")),
    "device=cpu": (dict(device=torch.device("cpu")), correct(rows_of(lambda fx: slice(None)))),
} if not torch.cuda.is_available() else {}


def other_width(fx):
    graph = copy.copy(fx.graph)
    graph.x = torch.ones(graph.num_nodes, 7)
    return graph


PREDICT_CASES = (
    [Case("predict", f"nodes: {name}", lambda fx, v=value: conveyor.predict(fx.models["pyg"], fx.graph, v(fx)), expect)
     for name, (value, expect) in NODES.items()]
    + [Case("predict", f"nodes on conveyor's model: {name}",
            lambda fx, v=value: conveyor.predict(fx.models["own"], fx.data, v(fx)),
            correct(rows_of(lambda fx, v=value: slice(None) if v(fx) is None else v(fx), "own")))
       for name, (value, _) in list(NODES.items())[:3]]
    + [Case("predict", name, lambda fx, k=kw: conveyor.predict(fx.models["pyg"], fx.graph, **k), expect)
       for name, (kw, expect) in KEYWORDS.items()]
    + [Case("predict", "model=42", lambda fx: conveyor.predict(42, fx.graph), refused("42 of type int")),
       Case("predict", "model=a class", lambda fx: conveyor.predict(GraphSAGE, fx.graph),
            refused("the class GraphSAGE: pass an instance")),
       Case("predict", "data=42", lambda fx: conveyor.predict(fx.models["pyg"], 42), refused("a PyG Data")),
       Case("predict", "data: a PyG Data", lambda fx: conveyor.predict(fx.models["pyg"], fx.data),
            correct(rows_of(lambda fx: slice(None)))),
       Case("predict", "data of another feature width", lambda fx: conveyor.predict(fx.models["pyg"], other_width(fx)),
            refused("takes 1433 features a node", "has 7")),
       Case("predict", "conveyor's model, another feature width",
            lambda fx: conveyor.predict(fx.models["own"], other_width(fx)), refused("takes 1433 features"))]
)


# -- load ----------------------------------------------------------------------------------------

def same_weights(kind: str):
    def check(model, fx):
        assert torch.allclose(conveyor.predict(model, fx.graph), fx.full[kind], atol=1e-6)
    return check


SIZES = {"pyg": ("in_channels", "hidden_channels", "num_layers", "out_channels"),
         "own": ("in_dim", "hidden", "out_dim", "num_layers")}
BAD_SIZES = {"'16' (text)": ("16", "where a size is a whole number"), "True": (True, "where a size is a whole number"),
             "0": (0, "where a size is a whole number"), "-4": (-4, "where a size is a whole number"),
             "2.0": (2.0, "where a size is a whole number"), "10**10": (10**10, "which no such model has")}


def set_init(key, value):
    return lambda state: state["module"]["init"].__setitem__(key, value)


def load_record_cases() -> list:
    cases = []
    for kind, keys in SIZES.items():
        for key in keys:
            for label, (value, words) in BAD_SIZES.items():
                if key == "num_layers" and label == "10**10":
                    words = "10,000,000,000"
                cases.append(Case("load", f"{kind} record: {key}={label}",
                                  lambda fx, k=kind, key=key, v=value, n=label: conveyor.load(
                                      fx.crafted(k, f"{key}={n}", set_init(key, v))), refused(words)))
    module = lambda state: state["module"]  # noqa: E731
    edits = {
        "init as a list": (lambda s: module(s).__setitem__("init", [1, 2]), "not a dict of plain values"),
        "init holding a tensor": (lambda s: module(s)["init"].__setitem__("dropout", torch.ones(1)), "plain values"),
        "no library": (lambda s: module(s).__delitem__("library"), "names no library"),
        "library os": (lambda s: module(s).__setitem__("library", "os"), "library is 'os'"),
        "class 42": (lambda s: module(s).__setitem__("class", 42), "class is 42"),
        "class subprocess.Popen": (lambda s: module(s).__setitem__("class", "Popen"), "does not build again"),
        "an unknown keyword": (set_init("frobnicate", 3), "does not build its"),
        "a reshaped weight": (lambda s: module(s)["state"].__setitem__(next(iter(module(s)["state"])),
                                                                      torch.zeros(3, 3)), "size mismatch"),
        "a weight as text": (lambda s: module(s)["state"].__setitem__(next(iter(module(s)["state"])), "w"),
                             "state is not a dict of tensors by name"),
        "a weight missing": (lambda s: module(s)["state"].__delitem__(next(iter(module(s)["state"]))), "Missing key"),
        "an extra weight": (lambda s: module(s)["state"].__setitem__("extra", torch.ones(2)), "Unexpected key"),
        "no module record": (lambda s: s.__delitem__("module"), "holds no model record"),
        "module as a list": (lambda s: s.__setitem__("module", [1]), "holds no model record"),
        "a list, not a dict": (lambda s: [1, 2, 3], "holds no model record"),
    }
    for kind in SIZES:
        cases += [Case("load", f"{kind} record: {name}",
                       lambda fx, k=kind, e=edit, n=name: conveyor.load(fx.crafted(k, n, e)), refused(words))
                  for name, (edit, words) in edits.items()]
    return cases


def file_at(fx, name: str, content: bytes) -> Path:
    path = fx.folder / "files" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(content)
    return path


LOAD_CASES = load_record_cases() + [
    Case("load", "pyg: as saved", lambda fx: conveyor.load(fx.checkpoints["pyg"]), correct(same_weights("pyg"))),
    Case("load", "own: its run folder", lambda fx: conveyor.load(fx.folder / "own"), correct(same_weights("own"))),
    Case("load", "into a model given", lambda fx: conveyor.load(fx.checkpoints["pyg"], model=GraphSAGE(1433, 16, 2, 7)),
         correct(same_weights("pyg"))),
    Case("load", "into a model of another shape",
         lambda fx: conveyor.load(fx.checkpoints["pyg"], model=GraphSAGE(1433, 8, 2, 7)), refused("do not fit")),
    Case("load", "model=42", lambda fx: conveyor.load(fx.checkpoints["pyg"], model=42), refused("42 of type int")),
    Case("load", "path=42", lambda fx: conveyor.load(42), refused("42 of type int")),
    Case("load", "a 0-byte file", lambda fx: conveyor.load(file_at(fx, "empty.pt", b"")), refused("it is empty")),
    Case("load", "random bytes", lambda fx: conveyor.load(file_at(fx, "noise.pt", os.urandom(4096))),
         refused("damaged or was not written by conveyor")),
    Case("load", "a truncated checkpoint", lambda fx: conveyor.load(
        file_at(fx, "cut.pt", fx.checkpoints["pyg"].read_bytes()[:5000])), refused("cannot read checkpoint")),
    Case("load", "a folder without checkpoints", lambda fx: conveyor.load(fx.folder / "files"),
         refused("holds no checkpoints/best.pt")),
    Case("load", "a missing path", lambda fx: conveyor.load(fx.folder / "nowhere.pt"), refused("does not exist")),
    Case("load", "resume from a 0-byte last.pt", lambda fx: resume_from(fx, b""), refused("it is empty")),
    Case("load", "resume from random bytes", lambda fx: resume_from(fx, os.urandom(999)), refused("cannot read")),
]


def resume_from(fx, content: bytes):
    """The checks a run.resume=true run makes of its out_dir, with `content` as its last.pt."""
    from conveyor.trainer.outputs.checkpoint import CHECKPOINT, prepare_out_dir
    out = fx.folder / "resume" / str(len(content))
    (out / CHECKPOINT).parent.mkdir(parents=True, exist_ok=True)
    (out / CHECKPOINT).write_bytes(content)
    return prepare_out_dir(make_config(f"run.out_dir={out}", "run.resume=true", f"data.root={fx.folder / 'data'}"))


# -- fit -----------------------------------------------------------------------------------------

def fit_small(fx, graph=None, model=None, **keywords):
    overrides = keywords.pop("overrides", [])
    out = fx.folder / "fit" / str(len(list((fx.folder / "fit").glob("*"))) if (fx.folder / "fit").exists() else 0)
    return conveyor.fit(fx.small if graph is None else graph, model, epochs=1, out_dir=out,
                        overrides=["pipeline=serial", "trainer.progress=false", "sampler.fanouts=[4,4]",
                                   *overrides], **keywords)


def with_x(fx, x) -> Graph:
    graph = copy.copy(fx.small)
    graph.x = x
    return graph


def trained(result, fx) -> None:
    assert len(result.history) == 1 and 0.0 <= result.final["test_acc"] <= 1.0


FIT_CASES = [
    Case("fit", "float64 x within float32's range", lambda fx: fit_small(fx, with_x(fx, fx.small.x.double())),
         correct(trained)),
    Case("fit", "float64 x beyond float32's range",
         lambda fx: fit_small(fx, with_x(fx, fx.small.x.double().index_fill(0, torch.tensor([3]), 1e300))),
         refused("beyond float32's range", "row 3")),
    Case("fit", "x with a NaN", lambda fx: fit_small(fx, with_x(fx, fx.small.x.index_fill(0, torch.tensor([2]),
                                                                                        float("nan")))),
         refused("non-finite")),
    Case("fit", "integer x", lambda fx: fit_small(fx, with_x(fx, torch.ones(300, 8, dtype=torch.long))),
         correct(trained)),
    Case("fit", "x of one dimension", lambda fx: fit_small(fx, with_x(fx, torch.ones(300))), refused("[N, F]")),
    Case("fit", "graph=42", lambda fx: conveyor.fit(42), refused("got a int")),
    Case("fit", "model=42", lambda fx: fit_small(fx, model=42), refused("got 42")),
    Case("fit", "model=a class", lambda fx: fit_small(fx, model=GraphSAGE), refused("is the class")),
    Case("fit", "a model of another width", lambda fx: fit_small(fx, model=GraphSAGE(9, 8, 2, 3)),
         refused("in_channels=9")),
    Case("fit", "model.hidden=10**9", lambda fx: fit_small(fx, overrides=["model.hidden=1000000000"]),
         refused("model.hidden=1000000000 with at least 2 classes and 2 layers needs at least", "Lower model.hidden")),
    Case("fit", "model.hidden=10**8: its batch's activations",
         lambda fx: fit_small(fx, overrides=["model.hidden=100000000"]),
         refused("a batch of 300 seeds at fanouts [4, 4]", "for the model's messages and activations")),
    Case("fit", "batch_size=0", lambda fx: fit_small(fx, batch_size=0), refused("trainer.batch_size")),
    Case("fit", "fanouts=[-2]", lambda fx: fit_small(fx, fanouts=[-2]), refused("sampler.fanouts")),
    Case("fit", "fanouts=[4, 'x']", lambda fx: fit_small(fx, fanouts=[4, "x"]), refused("sampler.fanouts")),
    Case("fit", "an unknown keyword", lambda fx: fit_small(fx, workers=4), refused("no keyword 'workers'")),
    Case("fit", "loss=42", lambda fx: fit_small(fx, loss=42), refused("callable")),
    Case("fit", "the stock model, sound", lambda fx: fit_small(fx), correct(trained)),
]


# -- sizes ---------------------------------------------------------------------------------------

def refusal_of(*overrides):
    return lambda fx: make_config(f"run.out_dir={fx.folder / 'cli'}", f"data.root={fx.folder / 'data'}", *overrides)


def huge_hub(fx):
    from conveyor.pipeline.room import check_batch_room
    hub = torch.zeros(1, dtype=torch.int32).expand(2 * 10**11)  # 10**11 in-edges each, without storage
    return check_batch_room(Graph(indptr=torch.tensor([0, 10**11, 2 * 10**11]), indices=hub, x=torch.ones(2, 4)),
                            [-1, -1], 2, "cpu")


SIZE_CASES = [
    Case("sizes", "model.hidden=10**10", refusal_of("model.hidden=10000000000"), refused("for the model's weights")),
    Case("sizes", "data.num_classes=10**12", refusal_of("data.num_classes=1000000000000"), refused("classes")),
    Case("sizes", "data.num_features=10**8", refusal_of("data.num_features=100000000"), refused("100000000 features")),
    Case("sizes", "data.num_features=10**7, hidden 1", refusal_of("data.num_features=10000000", "model.hidden=1"),
         refused("the synthetic graph of 48,981 nodes", "Lower data.scale")),
    Case("sizes", "data.scale=64", refusal_of("data.scale=64"), refused("the synthetic graph of 156,737,856 nodes")),
    Case("sizes", "400 layers of 10**5",
         refusal_of(f"sampler.fanouts=[{','.join(['2'] * 400)}]", "model.hidden=100000"),
         refused("and 400 layers needs at least")),
    Case("sizes", "a batch of 10**11 edges", huge_hub, refused("400,000,000,000 edges")),
    Case("sizes", "a sound run", refusal_of("model.hidden=64"), correct()),
]


# -- the pipeline's parts: objects without the protocols' methods, refused before a process starts --

def async_source(fx, sampler="spec", features="spec"):
    from conveyor.cache import CacheSettings, CacheSpec
    from conveyor.pipeline import PipelineSettings, batch_source
    from conveyor.samplers import SamplerSpec
    before = set(psutil.Process().children())
    try:
        return batch_source(fx.small, SamplerSpec("bsp", [4]) if sampler == "spec" else sampler,
                            CacheSpec(CacheSettings(policy="none")) if features == "spec" else features, "cpu",
                            PipelineSettings(name="async", depth=2))
    finally:
        assert set(psutil.Process().children()) == before  # refused before any process started


class Gatherer:
    feature_dim, dtype = 8, torch.float32

    def gather(self, n_id, out=None):
        return torch.zeros(len(n_id), 8)


PIPELINE_CASES = [
    Case("pipeline", "a sampler without sample()", lambda fx: async_source(fx, sampler=object()),
         refused("has neither sample(seeds)", "build(graph, device)")),
    Case("pipeline", "a sampler given as its class", lambda fx: async_source(fx, sampler=GraphSAGE),
         refused("has neither sample(seeds)")),
    Case("pipeline", "a feature source without stats()", lambda fx: async_source(fx, features=Gatherer()),
         refused("lacks stats")),
    Case("pipeline", "a feature source of nothing", lambda fx: async_source(fx, features=42), refused("lacks gather")),
]


# -- conveyor.NeighborLoader: its own arguments (the lead's table to extend) ----------------------

def first_batch(fx, data=None, **keywords):
    keywords = {"num_neighbors": [4, 4], "pipeline": "serial", **keywords}
    with conveyor.NeighborLoader(fx.graph if data is None else data, **keywords) as loader:
        return next(iter(loader))


LOADER_CASES = [
    Case("loader", "batch_size=0", lambda fx: first_batch(fx, batch_size=0), refused("batch_size")),
    Case("loader", "pipeline='bogus'", lambda fx: first_batch(fx, pipeline="bogus"), refused("bogus")),
    Case("loader", "a sound loader", lambda fx: first_batch(fx, batch_size=16, input_nodes=fx.data.test_mask),
         correct(lambda batch, fx: batch.batch_size == 16 or pytest.fail(str(batch)))),
    Case("loader", "input_nodes given more than once",
         lambda fx: first_batch(fx, batch_size=6, input_nodes=[5, 5, 9, 9, 1, 5]),
         correct(lambda batch, fx: batch.n_id[:6].tolist() == [5, 5, 9, 9, 1, 5] or pytest.fail(str(batch)))),
    Case("loader", "input_nodes out of range", lambda fx: first_batch(fx, input_nodes=[0, 10**6]), refused("0..2707")),
    Case("loader", "features 10^9 wide (a stride-0 view) at every neighbour",  # refused at construction, nothing copied
         lambda fx: first_batch(fx, data=wide_cora(fx), num_neighbors=[-1, -1], batch_size=512),
         refused("a batch of 512 seeds", "GiB", "Lower batch_size or num_neighbors")),
]


def wide_cora(fx):
    from torch_geometric.data import Data
    return Data(x=torch.zeros(1, 1).expand(fx.graph.num_nodes, 10**9), edge_index=fx.graph.edge_index())

CASES = PREDICT_CASES + LOAD_CASES + FIT_CASES + SIZE_CASES + PIPELINE_CASES + LOADER_CASES


@pytest.mark.timeout(CASE_LIMIT_S)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_a_door_gives_a_result_or_one_paragraph(case, fx):
    run_case(case, fx)


def test_the_sweep_is_generated_wide():
    doors = {case.door for case in CASES}
    assert doors == {"predict", "load", "fit", "sizes", "pipeline", "loader"} and len(CASES) > 120
    assert len({case.id for case in CASES}) == len(CASES)  # every case named once


# -- a small /dev/shm under the async pipeline, in a mount namespace of its own ------------------

SHM_SCRIPT = textwrap.dedent("""
    import json, sys, torch
    from conveyor.cache import CacheSettings, CacheSpec
    from conveyor.core import ConveyorError
    from conveyor.partition import Graph
    from conveyor.pipeline import PipelineSettings, batch_source
    from conveyor.samplers import SamplerSpec
    from tests.helpers import fill_shm
    settings = PipelineSettings(name="async", depth=2)
    spec = SamplerSpec("bsp", [5, 5])

    def graph(features, attrs=0):
        edges = torch.randint(0, 2000, (2, 20000), generator=torch.Generator().manual_seed(0))
        return Graph.from_edge_index(edges, 2000, x=torch.ones(2000, features), y=torch.zeros(2000, dtype=torch.long),
                                     node_attrs={"big": torch.ones(2000, attrs)} if attrs else {})
    cases = {"x larger than /dev/shm": (graph(2000), 64), "an attribute larger than /dev/shm": (graph(4, 2000), 64),
             "slots larger than /dev/shm": (graph(200), 1024), "a graph that fits": (graph(4), 16),
             "a full /dev/shm": (graph(4), 16)}
    for name, (g, batch) in cases.items():
        if name == "a full /dev/shm":
            fill_shm()
        try:
            source = batch_source(g, spec, CacheSpec(CacheSettings(policy="none")), "cpu", settings)
            started = len(source.processes) if hasattr(source, "processes") else 0
            with source:
                batches = sum(1 for _ in source.run([torch.arange(batch)], 0))
            print(json.dumps([name, "ok", batches, started]))
        except ConveyorError as error:
            print(json.dumps([name, "refused", str(error), 0]))
""")


@pytest.mark.skipif(not shm_namespaces_allowed(), reason="needs root and unshare -m (a private mount namespace)")
def test_a_small_shm_refuses_in_one_paragraph_before_it_fails():
    script = SHM_SCRIPT.replace('"', '\\"')
    result = in_small_shm(f'{sys.executable} -c "{script}"')
    assert result.returncode == 0 and "Traceback" not in result.stderr + result.stdout, result.stderr[-3000:]
    outcome = {name: (kind, text) for name, kind, text, _ in map(json.loads, result.stdout.splitlines())}
    assert outcome["a graph that fits"] == ("ok", 1)
    for name, words in {"x larger than /dev/shm": "the graph's tensors not mapped from its file",
                        "an attribute larger than /dev/shm": "the graph's tensors not mapped from its file",
                        "slots larger than /dev/shm": "the slots of both queues",
                        "a full /dev/shm": "semaphores"}.items():
        kind, text = outcome[name]
        assert kind == "refused" and words in text and "pipeline=serial" in text and "--shm-size=" in text, (name, text)
    assert set(outcome) == {"x larger than /dev/shm", "an attribute larger than /dev/shm", "slots larger than /dev/shm",
                            "a graph that fits", "a full /dev/shm"}

