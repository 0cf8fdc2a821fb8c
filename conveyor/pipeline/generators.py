"""A torch.Generator inside a stage's work (a user's sampler may hold one; bsp does) travels into
the spawned stage process with its stream where it was.

torch pickles a Generator with its state as a uint8 tensor, and torch.multiprocessing shares that
tensor's storage by file descriptor, which the child cannot map back ("unable to resize file ...:
Invalid argument"): the stage died unpickling its work. Registered with the ForkingPickler that
spawns the stage processes, the state travels as bytes instead.
"""
from __future__ import annotations

from multiprocessing.reduction import ForkingPickler

import torch


def rebuild_generator(device: str, state: bytes) -> torch.Generator:
    generator = torch.Generator(device=device)
    generator.set_state(torch.frombuffer(bytearray(state), dtype=torch.uint8))
    return generator


def reduce_generator(generator: torch.Generator):
    return rebuild_generator, (str(generator.device), bytes(generator.get_state().numpy()))


ForkingPickler.register(torch.Generator, reduce_generator)
