"""What the debug modes share: the errors they raise, the caller's Python stack, and the tensors an
operator wrote (its results and the arguments its schema marks as written)."""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils import _pytree as pytree

from ..._C import DEVICE_NAME

_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_DEBUG_DIR = os.path.dirname(__file__) + os.sep


class DebugModeError(RuntimeError):
    """Raised by a `torch.openreg.debug` mode that found what it checks for."""


class CpuMismatchError(DebugModeError):
    """compare_with_cpu: an operator's result differs from the CPU's beyond the tolerance."""


class NonFiniteError(DebugModeError):
    """check_finite: an operator produced NaN or Inf."""


class StreamSyncError(DebugModeError):
    """stream_sanitizer: an access or a free not ordered after another stream's use."""


def user_stack(limit: int = 12) -> str:
    """The caller's Python stack, most recent call last, without PyTorch's and this package's own
    frames (the dispatch machinery between the user's line and the mode)."""
    frames = [
        f
        for f in traceback.extract_stack()
        if not f.filename.startswith(_TORCH_DIR) and not f.filename.startswith(_DEBUG_DIR)
    ]
    return "".join(traceback.format_list(frames[-limit:]))


def is_openreg(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == DEVICE_NAME


def touches_openreg(args: Any, kwargs: Any) -> bool:
    for x in pytree.tree_leaves((args, kwargs)):
        if is_openreg(x) or (isinstance(x, torch.device) and x.type == DEVICE_NAME):
            return True
    return False


def written(func: Any, args: tuple, kwargs: dict, out: Any) -> Iterator[tuple[str, Any, Any]]:
    """(name, value, position) of everything the call wrote: each result ("output 0", ...) and each
    argument the schema marks as written ("argument 'self' (in place)"). `position` finds the same
    value in another call's arguments or results: ("out", i) or ("arg", name)."""
    for i, r in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
        yield f"output {i}", r, ("out", i)
    schema = func._schema
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = args[i] if i < len(args) else kwargs.get(a.name)
            yield f"argument '{a.name}' (written in place)", value, ("arg", a.name)


def lookup(position: tuple, func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    kind, key = position
    if kind == "out":
        return (out if isinstance(out, (tuple, list)) else (out,))[key]
    names = [a.name for a in func._schema.arguments]
    i = names.index(key)
    return args[i] if i < len(args) else kwargs.get(key)


# Operators whose results are not values to check: uninitialized memory, storage surgery, or
# bookkeeping of the allocator (record_stream).
UNCHECKED = frozenset(
    {"empty", "empty_strided", "new_empty", "new_empty_strided", "empty_like", "resize_", "set_", "record_stream"}
)


def op_name(func: Any) -> str:
    return f"{func._schema.name}{'.' + func._overloadname if func._overloadname != 'default' else ''}"


def checked(func: Any) -> bool:
    return func._schema.name.split("::")[-1] not in UNCHECKED
