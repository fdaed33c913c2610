"""Fake tensors' convolution for openreg: the layout the device gives. docs/design.md ("Patches of
torch") lists it with the other patches of torch.

# [marker: fake-convolution-patch]
Note [Fake convolutions answer in the CPU's layout]
On openreg a convolution's output, and convolution_backward's grad_input and grad_weight, come in
the memory format the CPU's convolution picks for the same sizes and strides (Note [Convolution
layouts] in csrc/aten/Convolution.cpp): channels-last when oneDNN or the 2-d slow kernels take a
channels-last input or weight. Fake tensors ask another question. FakeTensorMode's rule for the
four convolution operators (torch/_subclasses/fake_impls.py, `conv`, registered in
`op_implementations_dict`) picks the layout with `_select_conv_backend` and
`_conv_determine_backend_memory_format` on the fake device, and for a PrivateUse1 tensor ATen
answers ConvBackend.Overrideable and contiguous. So a compiled graph expected contiguous buffers
where the device wrote channels-last ones: Inductor's `assert_size_stride` after an extern
convolution_backward failed ("expected size 3==3, stride 1==9 at dim=1"), and a compiled
forward returned contiguous where eager returned channels-last. No release from 2.13 to 2.15 lets
a backend give its own answer (the rule is keyed by operator, not device), so the rule is wrapped:
for openreg tensors it asks the original rule about CPU fake tensors of the same sizes, strides
and dtype, the question the device's kernel asks, and moves the answer back to the device.

tests/test_compile.py#test_fake_convolution_still_needs_the_cpus_layout_patch calls the original
rule on openreg fake tensors and expects the contiguous answer: when PyTorch answers in the
device's layout, that test fails, and this patch should go.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils._pytree as pytree

from .._C import DEVICE_NAME

_CPU = torch.device("cpu")
_original: dict[Any, Any] = {}


def _convolution_ops() -> list[Any]:
    aten = torch.ops.aten
    return [
        aten.convolution.default,
        aten._convolution.default,
        aten._convolution.deprecated,
        aten.convolution_backward.default,
    ]


def _fake_on(fake_mode: Any, t: Any, device: torch.device) -> Any:
    """A fake tensor with t's sizes, strides and dtype on another device."""
    from torch._subclasses.fake_tensor import FakeTensor, in_kernel_invocation_manager

    with in_kernel_invocation_manager(fake_mode):
        meta = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")
    return FakeTensor(fake_mode, meta, device)


def _convolution(fake_mode: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
    from torch._subclasses.fake_tensor import FakeTensor

    original = _original[func]
    devices = {a.fake_device for a in pytree.tree_leaves((args, kwargs)) if isinstance(a, FakeTensor)}
    device = next((d for d in devices if d.type == DEVICE_NAME), None)
    if device is None or len(devices) != 1:
        return original(fake_mode, func, *args, **kwargs)  # not openreg's, or the rule's error to give

    def to_cpu(a: Any) -> Any:
        return _fake_on(fake_mode, a, _CPU) if isinstance(a, FakeTensor) else a

    def to_device(a: Any) -> Any:
        return _fake_on(fake_mode, a, device) if isinstance(a, FakeTensor) else a

    out = original(fake_mode, func, *pytree.tree_map(to_cpu, args), **pytree.tree_map(to_cpu, kwargs))
    return pytree.tree_map(to_device, out)


def apply() -> None:
    """Called when torch._subclasses.fake_impls has loaded (`import torch` loads it)."""
    from torch._subclasses import fake_impls

    for op in _convolution_ops():
        rule = fake_impls.op_implementations_dict.get(op)
        if rule is not None and rule is not _convolution:
            _original[op] = rule
            fake_impls.op_implementations_dict[op] = _convolution


def original_rule(op: Any) -> Any:
    """The rule this module wrapped, for the test that pins the reason for the patch."""
    return _original[op]
