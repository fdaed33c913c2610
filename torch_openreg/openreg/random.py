"""Random-number state of `torch.openreg`, shaped like `torch.cuda.random`.

Each device has a default generator with the CPU generator's engine and state layout
(csrc/core/Generator.h), so the same seed gives the same stream as on the CPU, and states can be
moved between the two."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from .. import _C
from .._C import DEVICE_NAME


def _index(device: Any) -> int:
    from . import _index as index

    return index(device)


def _generator(device: Any = None) -> torch.Generator:
    return _C._get_default_generator(_index(device))


# The default generator of each device, as `torch.cuda.default_generators` lists them. Making them
# does not initialize a device (csrc/core/Generator.cpp keeps one per device from the first call).
default_generators: tuple[torch.Generator, ...] = tuple(
    _C._get_default_generator(index) for index in range(_C._get_device_count())
)


def get_rng_state(device: Any = DEVICE_NAME) -> torch.Tensor:
    """The generator state of `device` as a CPU ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    return [get_rng_state(i) for i in range(torch.openreg.device_count())]


def set_rng_state(new_state: torch.Tensor, device: Any = DEVICE_NAME) -> None:
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seeds the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    for index in range(torch.openreg.device_count()):
        _generator(index).manual_seed(int(seed))


def seed() -> None:
    """Seeds the current device's generator with a non-deterministic number."""
    _generator().seed()


def seed_all() -> None:
    random_seed = _generator(0).seed()
    for index in range(1, torch.openreg.device_count()):
        _generator(index).manual_seed(random_seed)


def initial_seed() -> int:
    return _generator().initial_seed()


# The in-tree reference backend's module has these two; torch.cuda's has not. A Philox generator
# (CUDA's) is a seed plus an offset into its stream. Ours has the CPU generator's Mersenne Twister
# engine, whose position is its whole state: get_rng_state/set_rng_state save and restore it.
def set_offset(offset: int, device: Any = DEVICE_NAME) -> None:
    """Always raises: an openreg generator has no offset (see get_rng_state/set_rng_state)."""
    _offset_unsupported("set_offset", device)


def get_offset(device: Any = DEVICE_NAME) -> int:
    """Always raises: an openreg generator has no offset (see get_rng_state/set_rng_state)."""
    _offset_unsupported("get_offset", device)


def _offset_unsupported(name: str, device: Any) -> None:
    index = _index(device)
    _generator(index)  # a device that does not exist raises its own error first
    raise RuntimeError(
        f"{DEVICE_NAME} generator does not support {name}: the generator of {DEVICE_NAME}:{index} is "
        "the CPU generator's Mersenne Twister, which has no offset; save and restore its position "
        f"with torch.{DEVICE_NAME}.get_rng_state and set_rng_state"
    )


__all__ = [
    "default_generators",
    "get_offset",
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_offset",
    "set_rng_state",
    "set_rng_state_all",
]
