"""A pytest plugin for `check`'s tests_gpu step (`pytest -p benchmarks.gpu.pytest_order`): the
weighted kernel's tests run first, then the CUDA-IPC pipeline's (tests/pipeline/test_gpu_pipeline.py), then
the rest, each group in its usual order. The step is cut at its time limit; what it never reaches
is then the uniform kernel's tests, which smoke, stress and sanitize launch as well.

A test is the weighted kernel's when it draws with weight_attr: its parameters say so (a
`weight_attr` that is not None, or `weighted` true), or, unparametrised by it, its name or source
speaks of one. It prints the order as one JSON line.
"""
from __future__ import annotations

import inspect
import json

import pytest

WEIGHTED, PIPELINE, OTHER = 0, 1, 2
PIPELINE_MODULE = "test_gpu_pipeline.py"


def _source(item) -> str:
    try:
        return inspect.getsource(item.obj)
    except (OSError, TypeError, AttributeError):
        return ""


def rank(item) -> int:
    params = getattr(getattr(item, "callspec", None), "params", {})
    if "weight_attr" in params or "weighted" in params:  # parametrised over weighting: its weighted cases
        return WEIGHTED if params.get("weight_attr") is not None or params.get("weighted") else OTHER
    if "weight" in item.name or "weight_attr" in _source(item):
        return WEIGHTED
    return PIPELINE if item.path.name == PIPELINE_MODULE else OTHER


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    items.sort(key=rank)  # stable: each group keeps its order


def pytest_collection_finish(session):
    ranks = [rank(item) for item in session.items]
    order = {"weighted": ranks.count(WEIGHTED), "pipeline": ranks.count(PIPELINE), "other": ranks.count(OTHER),
             "first": [item.nodeid for item in session.items[:3]]}
    print("\n" + json.dumps({"gpu_suite_order": order}), flush=True)
