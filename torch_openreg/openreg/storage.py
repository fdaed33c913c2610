"""The legacy typed storage classes of the device: `torch.openreg.FloatStorage` and the others.

`tensor.storage_type()`, `TypedStorage.type()` and the legacy serialization path look up
`torch.<device>.<Name>Storage` for every device but the CPU (`torch.storage.TypedStorage.
_get_legacy_storage_class`); torch.cuda defines them, and without ours `storage_type()` is None.
TypedStorage places a class's storages on the device its module names
(`torch.storage._get_device_from_module`), hence `__module__ = "torch.openreg"`.
"""

from __future__ import annotations

import torch
from torch._utils import classproperty
from torch.storage import _dtype_to_storage_type_map, _LegacyStorage, _warn_typed_storage_removal

from .._C import DEVICE_NAME


class _OpenRegLegacyStorage(_LegacyStorage):
    """What no device storage can do: wrap a host buffer or a shared-memory file."""

    @classmethod
    def from_buffer(cls, *args, **kwargs):
        _warn_typed_storage_removal()
        raise RuntimeError(
            f"{DEVICE_NAME}: from_buffer is not available for openreg storages; make a CPU "
            f"storage and move it with .to('{DEVICE_NAME}')"
        )

    @classmethod
    def _new_with_weak_ptr(cls, *args, **kwargs):
        raise RuntimeError(f"{DEVICE_NAME}: _new_with_weak_ptr is not available for openreg storages")

    @classmethod
    def _new_shared_filename(cls, manager, obj, size, *, device=None, dtype=None):
        raise RuntimeError(
            f"{DEVICE_NAME}: storages are shared with torch.openreg IPC handles, not files (docs/ipc.md)"
        )


def _make(name: str, dtype: torch.dtype) -> type:
    def dtype_property(self):
        _warn_typed_storage_removal()
        return dtype

    cls = type(
        name,
        (_OpenRegLegacyStorage,),
        {
            "dtype": classproperty(dtype_property),
            "_dtype": classproperty(lambda self: dtype),
            "__module__": "torch.openreg",
        },
    )
    torch._storage_classes.add(cls)
    return cls


_classes = {name: _make(name, dtype) for dtype, name in _dtype_to_storage_type_map().items()}
globals().update(_classes)
__all__ = sorted(_classes)
