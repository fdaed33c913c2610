"""The changes to PyTorch 2.13.0 that compiling for openreg needs, both for one reason: Inductor
decides "is this the C++ backend?" by the device type being "cpu". docs/design.md ("Patches of
torch") lists every patch of torch in torch_openreg, these and the one torch.distributed needs.

# [marker: inductor-cpu-guard-patch]
Note [Inductor's CPU-only guards]
Inductor's scheduler applies three loop rewrites while fusing (inverting a node's loop index,
reordering loops, reindexing a pointwise node to a reduction's groups), and skips all three when
either node is on the CPU, because its C++ backend does not support them
(torch/_inductor/scheduler.py in 2.13.0: `BaseSchedulerNode.is_cpu`, `device.type == "cpu"`, at
the three call sites in `shared_data_after_inverting_indexing`,
`shared_data_after_reordering_loop` and `_try_reindex_pointwise_for_reduction`). openreg's
kernels come from that same C++ backend, but is_cpu() is false for them, so the rewrites run and
fail: reindexing a pointwise node for a softmax-like reduction raises "can't multiply sequence by
non-int" inside the scheduler. 2.13.0 has no per-backend switch for these rewrites (the
config flags that disable them are global, for every device). So `is_cpu()` is made true for
openreg nodes; it has no other caller in 2.13.0's Inductor.

tests/test_compile.py#test_inductor_still_needs_cpu_guard_patch compiles such a graph with the
original method and expects the failure: when PyTorch no longer fails there, that test fails,
and this patch should go.

# [marker: inductor-backend-patch]
Note [Inductor's backend of a device]
`torch._inductor.utils.get_current_backend` names the code generator of a device type: "cpu" gets
config.cpu_backend ("cpp"), a few known types theirs, and every other type config.cuda_backend
("triton"). Inductor's code generation asks it while propagating dtypes
(torch/_inductor/codegen/common.py, CSEProxy._default and the `deduce_*` helpers): with "triton"
for openreg, a masked load's dtype is taken the Triton way, is None in the C++ kernel, and
CppVecKernel fails (`assert scalar_var.dtype is not None`; seen on cross_entropy's backward).
2.13.0 registers a device's scheduling but not this answer, so get_current_backend answers
config.cpu_backend for openreg, in torch._inductor.utils and in codegen/common.py, which imported
it by name. tests/test_compile.py#test_inductor_still_names_triton_for_openreg pins the reason.
"""

from __future__ import annotations

from typing import Any

from .._C import DEVICE_NAME

_original_is_cpu: Any = None


def _is_cpu_or_openreg(self: Any) -> bool:
    device = self.get_device()
    return device is not None and device.type in ("cpu", DEVICE_NAME)


_original_get_current_backend: Any = None


def _get_current_backend(device_type: str | None = None) -> str:
    import torch._inductor.config as inductor_config
    from torch._inductor.virtualized import V

    if not device_type:
        device_type = V.graph.get_current_device_or_throw().type
    if device_type == DEVICE_NAME:
        return inductor_config.cpu_backend
    return _original_get_current_backend(device_type)


def apply() -> None:
    """Called once torch._inductor.scheduler has loaded (Note [Registration when Dynamo and
    Inductor load])."""
    global _original_is_cpu, _original_get_current_backend
    import torch._inductor.codegen.common as codegen_common
    import torch._inductor.utils as inductor_utils
    from torch._inductor.scheduler import BaseSchedulerNode

    if BaseSchedulerNode.is_cpu is not _is_cpu_or_openreg:
        _original_is_cpu = BaseSchedulerNode.is_cpu
        BaseSchedulerNode.is_cpu = _is_cpu_or_openreg  # type: ignore[method-assign]
    if inductor_utils.get_current_backend is not _get_current_backend:
        _original_get_current_backend = inductor_utils.get_current_backend
        inductor_utils.get_current_backend = _get_current_backend
        codegen_common.get_current_backend = _get_current_backend


def original_get_current_backend() -> Any:
    return _original_get_current_backend


def original_is_cpu() -> Any:
    """The method this module replaced, for the test that pins the reason for the patch."""
    return _original_is_cpu
