"""Sharing openreg tensors between processes (`torch.multiprocessing`, spawn; docs/ipc.md).

An openreg tensor put on a `torch.multiprocessing` queue, passed to a spawned process or returned
by a DataLoader worker reaches the other process as the same device memory, not a copy. PyTorch's
tensor reducer hands an openreg tensor's storage to the storage reducer registered for
`torch.UntypedStorage` with `ForkingPickler`; PyTorch's own handles only the CPU, CUDA and meta,
so this module registers one that shares openreg storages and passes every other device to
PyTorch's. See Note [Sharing storages between processes] in csrc/core/SharedStorage.h.
"""

from __future__ import annotations

import threading
import warnings
from multiprocessing.reduction import ForkingPickler

import torch
from torch.multiprocessing import reductions as _torch_reductions

from .. import _C
from .._C import DEVICE_NAME

__all__ = ["ipc_collect"]


def ipc_collect() -> int:
    """Frees the device memory of openreg tensors this process sent to others, dropped here, and
    released by every receiver (`torch.cuda.ipc_collect`'s counterpart). It also happens at every
    send and before the allocator reports out-of-memory. Returns how many such blocks receivers
    still hold."""
    return _C._ipc_collect()


def _rebuild_storage(handle: bytes, offset: int, nbytes: int) -> torch.UntypedStorage:
    from . import _lazy_init

    _lazy_init()  # a child forked after initialization says so here, as CUDA does
    return _C._ipc_open_storage(handle, offset, nbytes)


def _rebuild_empty_storage(device_index: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device(DEVICE_NAME, device_index))


def _raise_unshareable(message: str) -> None:
    raise RuntimeError(message)


# The thread in which multiprocessing.Queue pickles (Python 3.11, multiprocessing/queues.py).
_FEEDER_THREAD = "QueueFeederThread"


# [marker: storage-reducer]
def _reduce_storage(storage: torch.UntypedStorage):
    if storage.device.type != DEVICE_NAME:
        return _torch_reductions.reduce_storage(storage)
    if storage.nbytes() == 0:
        return (_rebuild_empty_storage, (storage.device.index,))
    try:
        handle, offset, nbytes = _C._ipc_share_storage(storage)
    except Exception as error:  # noqa: BLE001  (a pending task failure has the CPU's exception type)
        message = (
            f"{DEVICE_NAME}: cannot share a {storage.nbytes()}-byte storage on {storage.device} "
            f"with another process: {error}"
        )
        # Pickled in the caller's thread (Queue.put, see Note [Sharing fails at put, not in the
        # feeder thread]; Connection.send, SimpleQueue, a spawned Process's arguments): raise.
        # A queue's feeder thread would print the exception and drop the object, and the receiver
        # would wait forever: ship the error instead, so the receiver's get() raises it.
        if threading.current_thread().name != _FEEDER_THREAD:
            raise RuntimeError(message) from None
        warnings.warn(message, RuntimeWarning, stacklevel=2)
        return (_raise_unshareable, (message,))
    return (_rebuild_storage, (handle, offset, nbytes))


def _register() -> None:
    ForkingPickler.register(torch.UntypedStorage, _reduce_storage)


_register()
from . import _queue_put  # noqa: E402, F401  (Note [Sharing fails at put, not in the feeder thread])
