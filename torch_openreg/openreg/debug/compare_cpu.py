"""compare_with_cpu: every operator on openreg also runs on CPU copies of its inputs, and the first
result that differs from the CPU's beyond a tolerance (bitwise by default) raises CpuMismatchError
naming the operator, the difference and the Python stack. For bisecting where a model's numbers
diverge: the first operator reported is the first one whose kernel disagrees with the CPU's.

A TorchDispatchMode (PyTorch's own hook below autograd): while it is not entered, nothing of it
runs. On, each operator copies its inputs to the host before it runs (a synchronization), runs
twice, and copies its results back; docs/debugging.md gives the measured cost.

Not compared: random operators (the CPU copy would draw from the CPU's generator, not the
device's), and operators whose result is uninitialized memory (empty, resize_, set_).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ..._C import DEVICE_NAME
from ._common import CpuMismatchError, checked, is_openreg, lookup, op_name, touches_openreg, user_stack, written


def _to_cpu(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.cpu() if is_openreg(x) else x.clone()
    if isinstance(x, torch.device) and x.type == DEVICE_NAME:
        return torch.device("cpu")
    return x


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.contiguous()
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.dtype.is_floating_point:
        t = t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])
    return t


def _describe(t: torch.Tensor, i: tuple[int, ...]) -> str:
    v = t[i].item() if t.dim() else t.item()
    return repr(v)


def _difference(actual: Any, expected: Any, atol: float, rtol: float) -> str | None:
    """Why `actual` (from openreg) is not `expected` (from the CPU), or None."""
    if isinstance(actual, (list, tuple)) and isinstance(expected, (list, tuple)):  # foreach operators
        if len(actual) != len(expected):
            return f"has {len(actual)} elements, the CPU's {len(expected)}"
        for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
            if (problem := _difference(a, e, atol, rtol)) is not None:
                return f"[{i}] {problem}"
        return None
    if isinstance(actual, torch.Tensor) and isinstance(expected, torch.Tensor):
        a = actual.detach().cpu()
        e = expected.detach()
        if a.shape != e.shape or a.dtype != e.dtype:
            return f"is {a.dtype}{list(a.shape)}, the CPU's {e.dtype}{list(e.shape)}"
        if a.numel() == 0:
            return None
        if atol == 0 and rtol == 0:
            mismatch = _bits(a) != _bits(e)
            if mismatch.dim() > a.dim():  # complex: real and imaginary parts
                mismatch = mismatch.any(-1)
        elif a.is_floating_point() or a.is_complex():
            mismatch = ~torch.isclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
        else:
            mismatch = a != e
        count = int(mismatch.sum())
        if count == 0:
            return None
        if a.is_floating_point() or a.is_complex():
            gap = (
                a.to(torch.complex128 if a.is_complex() else torch.float64)
                - e.to(torch.complex128 if e.is_complex() else torch.float64)
            ).abs()
            gap = torch.where(mismatch, gap.nan_to_num(nan=math.inf), torch.zeros_like(gap))
            where = tuple(int(k) for k in torch.unravel_index(gap.argmax(), a.shape)) if a.dim() else ()
            largest = f"largest difference {gap.max().item():.6g}"
        else:
            where = tuple(int(k) for k in mismatch.nonzero()[0]) if a.dim() else ()
            largest = "first difference"
        return (
            f"{count} of {a.numel()} elements differ, {largest} at index {where}: "
            f"openreg {_describe(a, where)}, CPU {_describe(e, where)}"
        )
    if isinstance(actual, torch.Tensor) or isinstance(expected, torch.Tensor):
        return f"is {type(actual).__name__}, the CPU's {type(expected).__name__}"
    if isinstance(actual, float) and isinstance(expected, float) and math.isnan(actual) and math.isnan(expected):
        return None
    if actual != expected:
        return f"is {actual!r}, the CPU's {expected!r}"
    return None


class CompareWithCpuMode(TorchDispatchMode):
    def __init__(self, atol: float = 0.0, rtol: float = 0.0) -> None:
        super().__init__()
        self.atol, self.rtol = atol, rtol
        self.compared = 0  # operator calls compared, for tests and reports

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if not touches_openreg(args, kwargs) or not checked(func) or torch.Tag.nondeterministic_seeded in func.tags:
            return func(*args, **kwargs)
        cpu_args, cpu_kwargs = pytree.tree_map(_to_cpu, (args, kwargs))
        out = func(*args, **kwargs)
        try:
            cpu_out = func(*cpu_args, **cpu_kwargs)
        except Exception as e:  # the device accepted what the CPU refuses
            raise CpuMismatchError(
                f"openreg debug (compare with CPU): {op_name(func)} ran on openreg but the CPU raised "
                f"{type(e).__name__}: {e}\nPython stack (most recent call last):\n{user_stack()}"
            ) from e
        self.compared += 1
        for name, value, position in written(func, args, kwargs, out):
            expected = lookup(position, func, cpu_args, cpu_kwargs, cpu_out)
            problem = _difference(value, expected, self.atol, self.rtol)
            if problem is not None:
                tolerance = "bitwise" if self.atol == 0 and self.rtol == 0 else f"atol={self.atol}, rtol={self.rtol}"
                raise CpuMismatchError(
                    f"openreg debug (compare with CPU): {op_name(func)}: {name} {problem} "
                    f"(tolerance: {tolerance}).\nPython stack (most recent call last):\n{user_stack()}"
                )
        return out


@contextlib.contextmanager
def compare_with_cpu(atol: float = 0.0, rtol: float = 0.0) -> Iterator[CompareWithCpuMode]:
    """Within the block, every operator on openreg is checked against the CPU (see the module's
    docstring); bitwise unless `atol`/`rtol` are given (then as torch.isclose, NaN equal to NaN)."""
    with CompareWithCpuMode(atol, rtol) as mode:
        yield mode
