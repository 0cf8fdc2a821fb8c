"""One training epoch and one evaluation pass over prepared batches."""
from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from tqdm import tqdm

from .interrupts import raise_if_stop_requested


def train_epoch(model, optimizer, batches, total: int, progress: bool = True, desc: str = "train",
                on_batch=None) -> dict:
    model.train()
    loss_sum = correct = seen = edges = 0
    sample_s = gather_s = train_s = 0.0
    hits = misses = host_bytes = 0
    bar = tqdm(batches, total=total, desc=desc, disable=not progress, leave=False, dynamic_ncols=True)
    for step, pb in enumerate(bar):
        raise_if_stop_requested()
        t0 = time.perf_counter()
        out = model(pb.x.float(), pb.batch.layers())
        loss = F.cross_entropy(out, pb.y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        n = pb.y.numel()
        batch_loss = float(loss.detach())  # one sync per batch: the loss is logged anyway
        loss_sum += batch_loss * n
        correct += int((out.argmax(-1) == pb.y).sum())
        seen += n
        edges += pb.batch.num_sampled_edges
        train_s += time.perf_counter() - t0
        cost = pb.cost
        sample_s, gather_s = sample_s + cost.sample_s, gather_s + cost.gather_s
        hits, misses, host_bytes = hits + cost.cache_hits, misses + cost.cache_misses, host_bytes + cost.bytes_from_host
        bar.set_postfix(loss=f"{batch_loss:.3f}")
        if on_batch is not None:
            on_batch(step, batch_loss, pb)
    return {"loss": loss_sum / max(seen, 1), "train_acc": correct / max(seen, 1), "batches": step + 1 if seen else 0,
            "sample_s": sample_s, "gather_s": gather_s, "train_s": train_s, "sampled_edges": edges,
            "seeds": seen, "cache": {"cache_hit_ratio": hits / max(hits + misses, 1),
                                     "bytes_from_host": host_bytes}}


@torch.no_grad()
def evaluate(model, batches, total: int, progress: bool = False, desc: str = "eval") -> float:
    model.eval()
    correct = seen = 0
    for pb in tqdm(batches, total=total, desc=desc, disable=not progress, leave=False):
        raise_if_stop_requested()
        out = model(pb.x.float(), pb.batch.layers())
        correct += int((out.argmax(-1) == pb.y).sum())
        seen += pb.y.numel()
    return correct / max(seen, 1)
