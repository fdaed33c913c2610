"""The `occl` collective backend: torch.distributed on openreg devices, through Gloo.

Importing torch_openreg registers it (see docs/distributed.md). `occl` is the default backend of
the `openreg` device, so `init_process_group()` with no backend, `"cpu:gloo,openreg:occl"`,
`init_process_group("occl")` (openreg and CPU tensors both through occl), `DeviceMesh("openreg")`
and `init_device_mesh("openreg", ...)` all use it. The backend itself is C++
(csrc/distributed/ProcessGroupOccl.h): a ProcessGroupGloo made here runs every collective on the
device memory through kernel-window aliases, ordered with the current stream.
"""

import datetime

import torch.distributed as dist

from . import _C
from ._C import DEVICE_NAME
from ._compat import torch_before

BACKEND_NAME = "occl"


def _options_class():
    from torch._C._distributed_c10d import Backend as C10dBackend

    class OcclOptions(C10dBackend.Options):
        """occl's options as split_group reads them: it deep-copies the parent backend's
        `options`, which no c10d options object supports; this subclass copies itself."""

        def __deepcopy__(self, memo):
            copied = OcclOptions(self.backend, self._timeout)
            copied.group_name = self.group_name
            copied.global_ranks_in_group = list(self.global_ranks_in_group)
            return copied

    return OcclOptions


# [marker: occl-creator]
def _create_occl_backend(options, backend_options=None):
    """The creator torch.distributed calls once per device type of a new group (extended API)."""
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    gloo = ProcessGroupGloo(options.store, options.group_rank, options.group_size, timeout=options.timeout)
    gloo.options.global_ranks_in_group = options.global_ranks_in_group
    gloo.options.group_name = options.group_id
    return _C._occl_backend(gloo, _make_gloo)


def _make_gloo(store, rank, size, timeout_ms):
    """The Gloo backend of a group split from an occl group (ProcessGroupOccl::split)."""
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    return ProcessGroupGloo(store, rank, size, timeout=datetime.timedelta(milliseconds=timeout_ms))


# [marker: occl-registration]
def _register() -> None:
    """Registers `occl` for openreg and CPU tensors. Safe to call more than once."""
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    # Registered for the CPU too, so a group made with backend="occl" serves CPU tensors (object
    # collectives, a barrier) and new_group(backend="occl") works with a device bound. The CPU's
    # default stays Gloo: register_backend maps a device only if nothing maps it yet.
    dist.Backend.register_backend(BACKEND_NAME, _create_occl_backend, extended_api=True, devices=[DEVICE_NAME, "cpu"])
    options_class = _options_class()
    _C.ProcessGroupOccl.options = property(
        lambda backend: options_class(BACKEND_NAME, datetime.timedelta(milliseconds=backend._timeout_ms))
    )
    if torch_before(2, 14):  # needed while torch < 2.14: Note [Default backend type]
        from . import _distributed_patch

        _distributed_patch.apply()


if dist.is_available():
    _register()

__all__ = ["BACKEND_NAME"]
