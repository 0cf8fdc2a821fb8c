"""PyG's `sampler=` and `batch_sampler=`: torch samplers of seed positions, as PyG hands them to
its `DataLoader` over `range(len(input_nodes))` (e.g. `ImbalancedSampler`, drawing positions with
replacement by class weight).

`IndexSamplerPlan` is the loader's `SeedPlan` then: each epoch's batches are the positions the
torch sampler yields (a `sampler` cut by `batch_size` and `drop_last` with torch's own
`BatchSampler`; a `batch_sampler` as it yields them). The sampler draws from torch's global RNG, as
in PyG, once per epoch: the first time the epoch's batches are asked for, kept until the next one.

conveyor's own neighbour sampler was once given as `sampler=`; it is `node_sampler=` now (PyG's
`NodeLoader` keyword for that role), and the old spelling is refused by name.
"""
from __future__ import annotations

from typing import Dict, List, Optional

import torch
from torch import Tensor
from torch.utils.data import BatchSampler

from conveyor.core import ConveyorError
from conveyor.loader.seeds import STREAM_SAMPLER, stream_seed


def is_neighbour_sampler(value) -> bool:
    """Whether `value` is conveyor's own neighbour-sampler choice (a name, or an object with
    sample(seeds) or build(graph, device)): what `node_sampler=` takes."""
    return isinstance(value, str) or callable(getattr(value, "sample", None)) or \
        callable(getattr(value, "build", None))


def check_index_sampler(name: str, value, loader: str) -> None:
    """Refuse the old spelling (conveyor's neighbour sampler as sampler=) and anything that is no
    iterable of positions, before anything starts."""
    if value is None:
        return
    if is_neighbour_sampler(value):
        raise ConveyorError(
            f"conveyor.{loader}'s neighbour sampler is given as node_sampler= (PyG's NodeLoader name for that "
            f"role), no longer as {name}=: write node_sampler={value!r}. {name}= keeps PyG's meaning, a torch "
            f"sampler of positions in the loader's seeds (e.g. ImbalancedSampler), as PyG passes it to its "
            f"DataLoader.")
    if not hasattr(value, "__iter__"):
        raise ConveyorError(f"conveyor.{loader}'s {name}= takes a torch sampler (an iterable of seed positions"
                            f"{' lists' if name == 'batch_sampler' else ''}, e.g. ImbalancedSampler), got a "
                            f"{type(value).__name__}.")


def index_batches(sampler, batch_sampler, batch_size: int, shuffle: bool, drop_last: bool, loader: str):
    """The torch batch sampler of PyG's sampler=/batch_sampler= keywords (None: neither given),
    with torch DataLoader's own rules on combining them with shuffle, batch_size and drop_last."""
    check_index_sampler("sampler", sampler, loader)
    check_index_sampler("batch_sampler", batch_sampler, loader)
    if sampler is None and batch_sampler is None:
        return None
    if shuffle:
        raise ConveyorError(f"conveyor.{loader}: shuffle=True with a sampler= or batch_sampler= (torch's "
                            f"DataLoader refuses the pair too): the sampler chooses the order; leave shuffle out.")
    if batch_sampler is not None:
        if sampler is not None or batch_size != 1 or drop_last:
            raise ConveyorError(f"conveyor.{loader}: batch_sampler= yields whole batches, so it excludes sampler=, "
                                f"batch_size and drop_last (torch's DataLoader refuses them too); leave them out.")
        return batch_sampler
    return BatchSampler(sampler, batch_size, drop_last)


class IndexSamplerPlan:
    """A SeedPlan (loader/seeds.py) whose batches a torch batch sampler draws (module doc)."""

    def __init__(self, nodes: Tensor, batches, seed: int):
        self.nodes, self.batches, self.seed = nodes, batches, seed
        self._drawn: Dict[int, List[Tensor]] = {}

    def positions(self, epoch: int) -> List[Tensor]:
        if epoch not in self._drawn:
            self._drawn = {epoch: [self._checked(torch.as_tensor(b, dtype=torch.long).view(-1))
                                   for b in self.batches]}
        return self._drawn[epoch]

    def _checked(self, positions: Tensor) -> Tensor:
        count = self.nodes.numel()
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= count):
            raise ConveyorError(f"the sampler given yielded positions from {int(positions.min())} to "
                                f"{int(positions.max())}, but the loader has {count} seeds (positions 0..{count - 1}).")
        return positions

    def sampler_seed(self, epoch: int) -> int:
        return stream_seed(self.seed, epoch, STREAM_SAMPLER)

    def __len__(self) -> int:
        return len(self.batches)


def plan_of(nodes: Tensor, batches: Optional[object], seed: int, default):
    """The loader's plan: the torch batch sampler's when one was given, else `default`'s."""
    return default if batches is None else IndexSamplerPlan(nodes, batches, seed)
