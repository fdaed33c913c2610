"""The one patch torch.distributed 2.13 needs for occl; see Note [Default backend type]. Applied
only while torch < 2.14 (torch_openreg/distributed.py): 2.14 sets the type itself.

# [marker: distributed-patch]
Note [Default backend type]
`init_process_group()` with no backend maps only the accelerator (openreg -> occl), but then sets
the group's default backend type to GLOO unless NCCL is among its backends
(distributed_c10d.py, _new_process_group_helper, "Currently when backend is UNDEFINED"). The group
has no Gloo backend, so everything that asks for the default backend fails:
DistributedDataParallel raises "Could not find backend type 1". The fix is PyTorch's own
behaviour for a custom backend named explicitly: a group whose backends are all custom plugins
gets the CUSTOM default type. We wrap _new_process_group_helper to set it after the group is made,
only in that case. PyTorch 2.14 does it itself; tests/test_distributed.py::
test_default_backend_type_is_custom_with_the_patch_before_2_14_and_without_it_from_2_14 checks both
halves on each release. The file goes when the oldest supported release is 2.14.
"""

import functools
import inspect

import torch.distributed.distributed_c10d as c10d

_patched = False


def _needs_custom_default(pg, backend) -> bool:
    if str(backend) != c10d.Backend.UNDEFINED or not isinstance(pg, c10d.ProcessGroup):
        return False
    device_backends = c10d.BackendConfig(c10d.Backend(c10d.Backend.UNDEFINED)).get_device_backend_map()
    return bool(device_backends) and all(str(b).upper() in c10d.Backend._plugins for b in device_backends.values())


def apply() -> None:
    global _patched
    if _patched:
        return
    original = c10d._new_process_group_helper
    signature = inspect.signature(original)

    @functools.wraps(original)
    def _new_process_group_helper(*args, **kwargs):
        pg, store = original(*args, **kwargs)
        backend = signature.bind(*args, **kwargs).arguments.get("backend")
        if _needs_custom_default(pg, backend):
            pg._set_default_backend(c10d.ProcessGroup.BackendType.CUSTOM)
        return pg, store

    _new_process_group_helper.__wrapped_original__ = original
    c10d._new_process_group_helper = _new_process_group_helper
    _patched = True
