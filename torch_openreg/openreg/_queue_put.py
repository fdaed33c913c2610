"""Note [Sharing fails at put, not in the feeder thread]

`multiprocessing.Queue.put` (Python 3.11; PyTorch 2.13.0's `torch.multiprocessing` re-exports it
unchanged) only appends the object to a buffer: a feeder thread pickles it later. A reducer that
fails there cannot reach the caller: the feeder prints the exception and drops the object, and the
receiver waits forever. That is how an openreg tensor on a queue used to hang (PyTorch's storage
reducer raised "_share_fd_: only available on CPU" in the feeder). CUDA tensors have the same gap.

So for an object that holds openreg tensors or storages (itself, or inside a tuple, list or dict up
to two levels down), `put` here pickles in the caller's thread first, with the storage reducer
raising as it does outside a queue's feeder thread (torch_openreg/openreg/ipc.py), and enqueues
the bytes. A sender-side failure (a pending task failure, memory received from another process, a
child forked after initialization sending its parent's tensor) then raises from `put`. So does
sending through a queue of the "fork" start method after this process initialized openreg and
forked: the receiver would be a forked child, which cannot use the device. Everything else is
untouched; openreg tensors deeper inside other objects still go through the feeder, where a
failure makes the receiver's `get` raise it (never a hang).

This is the one patch of the package's IPC support;
test_a_failing_share_raises_at_put_and_python_still_needs_the_patch in tests/test_ipc.py fails
once Python's queue pickles in `put` itself and the patch can go.
"""

from __future__ import annotations

import multiprocessing.queues
import os
import pickle
from multiprocessing.reduction import ForkingPickler

import torch

from .._C import DEVICE_NAME

_forked_after_init = False


def _note_fork() -> None:
    global _forked_after_init
    if torch.openreg.is_initialized():
        _forked_after_init = True


def _holds_openreg(obj, depth: int = 0) -> bool:
    if isinstance(obj, (torch.Tensor, torch.UntypedStorage, torch.TypedStorage)):
        return obj.device.type == DEVICE_NAME
    if depth < 2 and isinstance(obj, (tuple, list)):
        return any(_holds_openreg(item, depth + 1) for item in obj)
    if depth < 2 and isinstance(obj, dict):
        return any(_holds_openreg(item, depth + 1) for item in obj.values())
    return False


def _made_by_fork_context(queue) -> bool:
    # A "fork" context unlinks its semaphores at creation, so their name is None; "spawn" and
    # "forkserver" semaphores have one (multiprocessing/synchronize.py, SemLock.__init__).
    semlock = getattr(getattr(queue, "_rlock", None), "_semlock", None)
    return semlock is not None and getattr(semlock, "name", "") is None


def _unpickle(data: bytes):
    return pickle.loads(data)


class _Pickled:
    """An object already pickled in the caller's thread; the receiver's get() returns it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return (_unpickle, (self.data,))


# [marker: queue-put]
def _patched(original):
    def put(self, obj, block=True, timeout=None):
        if _holds_openreg(obj):
            if _forked_after_init and _made_by_fork_context(self):
                raise RuntimeError(
                    f"{DEVICE_NAME}: cannot put openreg tensors on a queue of the 'fork' start method "
                    "after openreg was initialized and this process forked: a forked child cannot "
                    "use the device. Create the queue and the processes with "
                    "torch.multiprocessing.get_context('spawn')."
                )
            obj = _Pickled(bytes(ForkingPickler.dumps(obj)))
        return original(self, obj, block, timeout)

    put._openreg_original = original
    put.__doc__ = original.__doc__
    return put


def _install() -> None:
    # JoinableQueue has a put of its own, not Queue's.
    for queue_class in (multiprocessing.queues.Queue, multiprocessing.queues.JoinableQueue):
        if not hasattr(queue_class.put, "_openreg_original"):
            queue_class.put = _patched(queue_class.put)
    os.register_at_fork(after_in_parent=_note_fork)


_install()
