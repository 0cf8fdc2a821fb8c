"""The data a run trains on, as each checkpoint records it, so that a resumed run refuses other
data: a custom dataset replaced under the same path, a regenerated cache, another partitioning's
graph, one feature row changed. The config check (trainer/outputs/resume.py) sees only the
options; this sees the data.

A fingerprint is the whole graph's shapes (nodes, edges, feature width and dtype, classes) and
`partition.digest.contents_digest`, a digest of every row of every array the graph holds. A
checkpoint written before that digest (whose digest sampled 65,536 feature rows) resumes on
matching shapes, with a warning that its contents cannot be compared. Under DDP a rank holds only
its part, so the whole graph's shapes and digest come from the partitioning's header (the same
digest, with which the partitioning was checked).
"""
from __future__ import annotations

import logging
from pathlib import Path

from conveyor.core import ConveyorError
from conveyor.partition import Graph
from conveyor.partition.digest import DIGEST_VERSION, contents_digest

log = logging.getLogger("conveyor")

SHAPES = ("nodes", "edges", "feature_width", "feature_dtype", "classes")


def data_fingerprint(graph: Graph, whole: dict | None = None) -> dict:
    """`graph`'s fingerprint; `whole`: the partitioning's header (graph_nodes, graph_edges,
    fingerprint) when `graph` is one rank's part of it."""
    x = graph.x
    shapes = {"feature_width": None if x is None else int(x.size(1)),
              "feature_dtype": None if x is None else str(x.dtype).replace("torch.", ""),
              "classes": int(graph.num_classes)}
    if whole is not None:
        return {"nodes": int(whole["graph_nodes"]), "edges": int(whole["graph_edges"]), **shapes,
                "digest": whole["fingerprint"]}
    return {"nodes": graph.num_nodes, "edges": graph.num_edges, **shapes, "digest": contents_digest(graph)}


def check_same_data(saved: dict | None, now: dict, path: Path) -> None:
    """Refuse (ConveyorError) to resume the checkpoint at `path` on data other than its own;
    a checkpoint from before fingerprints, or before every row was hashed, resumes with a warning."""
    if not isinstance(saved, dict):
        log.warning("the checkpoint %s records no data fingerprint (written by an earlier conveyor): "
                    "cannot check that the data is the one it was trained on", path)
        return
    shapes = [f"{key} {saved.get(key)} in the checkpoint, {now[key]} now" for key in SHAPES
              if saved.get(key) != now[key]]
    digests = (str(saved.get("digest")), str(now["digest"]))
    comparable = digests[0].startswith(DIGEST_VERSION) == digests[1].startswith(DIGEST_VERSION)
    if not shapes and not comparable:
        log.warning("the checkpoint %s records its data's digest in an earlier form (a sample of the feature "
                    "rows): the shapes match, its contents cannot be compared", path)
        return
    if not shapes and digests[0] == digests[1]:
        return
    what = ("; ".join(shapes) if shapes else
            f"the same shapes, but other contents: digest {digests[0]} in the checkpoint, "
            f"{digests[1]} now (its edges, splits, labels or features changed)")
    raise ConveyorError(
        f"run.resume=true, but the checkpoint {path} was trained on other data than the data "
        f"loaded now ({what}). Resuming would continue that training on a different graph. Give "
        f"the data it was trained on (the same data.path or dataset files), or start a new run in "
        f"another run.out_dir.")
