"""check_finite: the first operator on openreg that produces NaN or Inf raises NonFiniteError,
naming it, how many of each it produced, and the Python stack.

A TorchDispatchMode: while it is not entered, nothing of it runs. On, every floating or complex
result (and argument written in place) of an operator on openreg is tested with isfinite on the
device, and the answer read on the host: one synchronization per operator; docs/debugging.md
gives the measured cost. Operators whose result is uninitialized memory (empty, resize_) are
not checked.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ._common import NonFiniteError, checked, is_openreg, op_name, touches_openreg, user_stack, written


class CheckFiniteMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.checked = 0  # tensors checked, for tests and reports

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not checked(func) or not touches_openreg(args, kwargs):
            return out
        for name, value, _ in written(func, args, kwargs, out):
            if not is_openreg(value) or not (value.is_floating_point() or value.is_complex()) or value.numel() == 0:
                continue
            self.checked += 1
            finite = torch.isfinite(value)
            if bool(finite.all()):
                continue
            nan = int(torch.isnan(value).sum())
            inf = int((~finite).sum()) - nan
            raise NonFiniteError(
                f"openreg debug (non-finite check): {op_name(func)} produced {nan} NaN and {inf} Inf "
                f"of {value.numel()} elements in {name}.\nPython stack (most recent call last):\n{user_stack()}"
            )
        return out


@contextlib.contextmanager
def check_finite() -> Iterator[CheckFiniteMode]:
    """Within the block, the first operator on openreg producing NaN or Inf raises NonFiniteError."""
    with CheckFiniteMode() as mode:
        yield mode
