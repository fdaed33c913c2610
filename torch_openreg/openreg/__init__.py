"""`torch.openreg`: the device module of the openreg backend, shaped like `torch.cuda`.

Device queries (`is_available`, `device_count`, `get_device_properties`, ...) do not initialize
the devices, so calling them before `fork` is safe. The first use of a device initializes it
(`_lazy_init`); a child process forked after that gets a clear error and should use `spawn`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

import torch

from .. import _C
from .._C import DEVICE_NAME
from . import amp, debug, graphs as _graphs, ledger as _ledger, memory as _memory, meta as _meta, random as _random  # noqa: F401  (meta registers kernels)
from .graphs import *  # noqa: F403  (listed in graphs.__all__)
from .ipc import *  # noqa: F403  (listed in ipc.__all__; registers the storage reducer)
from .ipc import __all__ as _ipc_all
from .ledger import *  # noqa: F403  (listed in ledger.__all__)
from .memory import *  # noqa: F403  (listed in memory.__all__)
from .random import *  # noqa: F403  (listed in random.__all__)
from .storage import *  # noqa: F403  (listed in storage.__all__)
from .storage import __all__ as _storage_all
from .streams import (
    Event,
    Stream,
    StreamContext,
    current_stream,
    default_stream,
    set_stream,
    stream,
)

_initialized = False
_init_lock = threading.Lock()

_device_t = int | str | torch.device | None


# [marker: lazy-init]
def _lazy_init() -> None:
    global _initialized
    if is_initialized():
        return
    with _init_lock:
        if is_initialized():
            return
        if _C._is_in_bad_fork():
            # torch.cuda's words with CUDA's name replaced, as the in-tree reference has them.
            raise RuntimeError(
                f"{DEVICE_NAME}: Cannot re-initialize OpenReg in forked subprocess. To use OpenReg with "
                "multiprocessing, you must use the 'spawn' start method"
            )
        _C._init()
        _initialized = True


def _is_in_bad_fork() -> bool:
    """True in a child forked after initialization (torch.manual_seed checks it)."""
    return _C._is_in_bad_fork()


def init() -> None:
    """Initializes the openreg devices (their memory and workers). Usually implicit."""
    _lazy_init()


def is_initialized() -> bool:
    return _initialized and not _C._is_in_bad_fork()


def is_available() -> bool:
    """True when at least one openreg device exists. Never initializes a device."""
    return device_count() > 0


def device_count() -> int:
    """Number of openreg devices (OPENREG_DEVICE_COUNT). Never initializes a device."""
    return _C._get_device_count()


def _index(device: _device_t, optional: bool = True) -> int:
    """The device index of an int, a string like 'openreg:1', a torch.device, or None (current)."""
    if device is None:
        return current_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_NAME:
            raise ValueError(f"{DEVICE_NAME}: expected an openreg device, got '{device}'")
        return current_device() if device.index is None else device.index
    if isinstance(device, int):
        return device
    raise TypeError(f"{DEVICE_NAME}: expected a device index, string or torch.device, got {type(device).__name__}")


def current_device() -> int:
    return _C._get_device()


def set_device(device: _device_t) -> None:
    index = _index(device)
    if index >= 0:
        # Setting a device initializes, as torch.cuda.set_device does: afterwards
        # is_initialized() is True (DeviceMesh checks it before setting the device again).
        _lazy_init()
        _C._set_device(index)


class device:
    """Context manager that makes `device` current and restores the previous one on exit."""

    def __init__(self, device: _device_t):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = _C._exchange_device(self.idx)

    def __exit__(self, *args: Any) -> bool:
        if self.prev_idx >= 0 and self.prev_idx != self.idx:
            _C._set_device(self.prev_idx)
        return False


class device_of(device):
    """Context manager that makes the device of tensor `obj` current (no-op for CPU tensors)."""

    def __init__(self, obj: torch.Tensor):
        super().__init__(obj.get_device() if obj.is_openreg else None)


def synchronize(device: _device_t = None) -> None:
    """Waits for all work on `device` (default: the current device) to complete."""
    _lazy_init()
    _C._synchronize(_index(device))


@dataclasses.dataclass(frozen=True)
class DeviceProperties:
    """A device's properties as attributes, as `torch.cuda.get_device_properties` gives them
    (torchtitan reads `.total_memory`, Inductor `.multi_processor_count`): the runtime's figures,
    and for `multi_processor_count` the host's CPU count, since the kernels run on the host's cores."""

    name: str
    total_memory: int
    worker_count: int
    memory_alignment: int
    major: int
    minor: int
    multi_processor_count: int


def get_device_properties(device: _device_t = None) -> DeviceProperties:
    """Name, total_memory, worker_count, memory_alignment, major, minor and multi_processor_count of
    a device, read from the runtime's configuration without initializing it."""
    return DeviceProperties(**_C._get_device_properties(_index(device)), multi_processor_count=os.cpu_count() or 1)


def get_device_name(device: _device_t = None) -> str:
    return get_device_properties(device).name


def get_device_capability(device: _device_t = None) -> tuple[int, int]:
    props = get_device_properties(device)
    return props.major, props.minor


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """True: every operator runs the CPU's kernel, bfloat16 ones included (accelerate, transformers
    and DeepSpeed ask before they enable bf16). `including_emulation` is torch.cuda's argument;
    there is nothing emulated to exclude."""
    return is_available()


def is_tf32_supported() -> bool:
    """False: float32 matrix products run the CPU's kernels in full float32, never TensorFloat-32."""
    return False


# torch.cuda.has_half: float16 tensors and kernels exist on the device.
has_half: bool = True


def can_device_access_peer(device: _device_t, peer: _device_t) -> bool:
    """True for two valid devices: every openreg device of the process can copy to and from every
    other (csrc/aten/Copy.cpp). Raises for an index outside 0..device_count()-1, as CUDA does."""
    count = device_count()
    index, peer_index = _index(device), _index(peer)
    for name, value in (("device", index), ("peer", peer_index)):
        if not 0 <= value < count:
            raise AssertionError(f"{DEVICE_NAME}: invalid {name} id {value} (device_count() is {count})")
    return True


def _sleep(milliseconds: int) -> None:
    """Keeps the current stream busy for `milliseconds` (for tests, like torch.cuda._sleep)."""
    _lazy_init()
    _C._sleep(milliseconds)


def _inductor_backend_init() -> None:
    """Registers openreg with Inductor. torch >= 2.15 calls it before lowering a graph for the
    device (Note [Registration when Dynamo and Inductor load], torch_openreg/_compile)."""
    from torch_openreg._compile import register_inductor

    register_inductor()


def get_amp_supported_dtype() -> list[torch.dtype]:
    return [torch.float16, torch.bfloat16]


__all__ = [
    "Event",
    "amp",
    "debug",
    "Stream",
    "StreamContext",
    "can_device_access_peer",
    "current_device",
    "current_stream",
    "default_stream",
    "device",
    "device_count",
    "device_of",
    "get_amp_supported_dtype",
    "get_device_capability",
    "get_device_name",
    "get_device_properties",
    "has_half",
    "init",
    "is_available",
    "is_bf16_supported",
    "is_initialized",
    "is_tf32_supported",
    "set_device",
    "set_stream",
    "stream",
    "synchronize",
    *_ledger.__all__,
    *_memory.__all__,
    *_random.__all__,
    *_ipc_all,
    *_graphs.__all__,
    *_storage_all,
]
