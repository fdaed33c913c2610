"""stream_sanitizer: what `TORCH_CUDA_SANITIZER` does for CUDA, for openreg streams. Reported, with
the stacks of both sides:

- a read or write on one stream of memory last written (or, for a write, read) on another stream
  without an event wait, stream wait or synchronization ordering them (PyTorch's own analysis,
  `torch.cuda._sanitizer.EventHandler`, fed by openreg's device trace: Note [Device trace] in
  csrc/core/DeviceTrace.h);
- a free of memory that another stream used, with neither `record_stream` on that stream nor a
  synchronization ordering that use before the allocating stream's next work (the caching
  allocator would hand the memory out again while the other stream may still use it).

A race raises StreamSyncError at the operator that makes it. A bad free is found inside a tensor's
destructor, where nothing may raise: it raises at the next operator under the sanitizer, or when
the sanitizer is left.

Off (not entered), nothing of it runs: the device trace costs one atomic load per event call,
allocation and free. On, every operator parses its arguments in Python and every event,
synchronization, allocation and free runs a Python callback; docs/debugging.md gives the cost.
"""

from __future__ import annotations

import contextlib
import inspect
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from ... import _C
from .. import _gpu_trace
from ._common import StreamSyncError, is_openreg

_aten = torch.ops.aten


def _stack() -> traceback.StackSummary:
    stack = traceback.StackSummary.extract(traceback.walk_stack(inspect.currentframe()), lookup_lines=False)
    stack.reverse()
    return stack


@dataclass
class _Allocation:
    stream: int
    stack: traceback.StackSummary


class StreamSanitizerMode(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        # Imported here: importing it activates PyTorch's GPU trace for the process (its module
        # creates the CUDA sanitizer's mode), which only a sanitizer should do.
        from torch.cuda._sanitizer import EventHandler

        self.handler = EventHandler()
        self.allocations: dict[int, _Allocation] = {}
        self.recorded: dict[int, set[int]] = {}  # data pointer -> streams given by record_stream
        self.pending: list[str] = []  # bad frees, raised at the next operator
        self.callbacks = [
            (_gpu_trace.EventCreationCallbacks, self.handler._handle_event_creation),
            (_gpu_trace.EventDeletionCallbacks, self.handler._handle_event_deletion),
            (_gpu_trace.EventRecordCallbacks, self.handler._handle_event_record),
            (_gpu_trace.EventWaitCallbacks, self.handler._handle_event_wait),
            (_gpu_trace.MemoryAllocationCallbacks, self._allocation),
            (_gpu_trace.MemoryDeallocationCallbacks, self._deallocation),
            (_gpu_trace.DeviceSynchronizationCallbacks, self.handler._handle_device_synchronization),
            (_gpu_trace.StreamSynchronizationCallbacks, self.handler._handle_stream_synchronization),
            (_gpu_trace.EventSynchronizationCallbacks, self.handler._handle_event_synchronization),
        ]

    def __enter__(self) -> StreamSanitizerMode:
        for registry, callback in self.callbacks:
            registry.add_callback(callback)
        torch._C._activate_gpu_trace()
        _C._set_device_trace(True)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        _C._set_device_trace(False)
        for registry, callback in self.callbacks:
            registry.callback_list.remove(callback)
        if exc[0] is None:
            self._raise_pending()

    # -- the device trace -------------------------------------------------------------------
    def _allocation(self, ptr: int) -> None:
        stream = torch.openreg.current_stream().native_handle
        self.allocations[ptr] = _Allocation(stream, _stack())
        self.recorded.pop(ptr, None)
        self.handler._handle_memory_allocation(ptr)

    def _deallocation(self, ptr: int) -> None:
        allocation = self.allocations.pop(ptr, None)
        recorded = self.recorded.pop(ptr, set())
        info = self.handler.tensors_accessed.accesses.get(ptr)
        if allocation is not None and info is not None:
            syncs = self.handler.syncs
            for access in [info.write, *info.reads]:
                if (
                    access is None
                    or access.stream == allocation.stream
                    or access.stream in recorded
                    or syncs.is_ordered_after(allocation.stream, access.seq_num, access.stream)
                ):
                    continue
                self.pending.append(self._bad_free(ptr, allocation, access))
                break
        if info is not None:
            self.handler._handle_memory_deallocation(ptr)

    def _bad_free(self, ptr: int, allocation: _Allocation, access: Any) -> str:
        return (
            f"openreg stream sanitizer: memory at {ptr}, allocated on stream {allocation.stream}, "
            f"was freed while stream {access.stream} may still be {access.type} it ({access.operator.name}), "
            "with neither record_stream on that stream nor a synchronization ordering that use before "
            "the allocating stream's next work: the caching allocator may hand the memory out again "
            f"while the kernel runs. Call tensor.record_stream(stream) after the use.\n"
            f"Freed at:\n{''.join(_stack().format())}\n"
            f"Used on stream {access.stream} at:\n{''.join(access.stack_trace.format())}\n"
            f"Allocated at:\n{''.join(allocation.stack.format())}"
        )

    def _raise_pending(self) -> None:
        if self.pending:
            messages, self.pending = self.pending, []
            raise StreamSyncError("\n".join(messages))

    # -- operators ----------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        self._raise_pending()
        if func is _aten.record_stream.default:
            tensor, stream = args
            self.recorded.setdefault(tensor.untyped_storage().data_ptr(), set()).add(stream.native_handle)
            return func(*args, **kwargs)
        reads: set[int] = set()
        writes: set[int] = set()
        names: dict[int, list[str]] = {}
        device = None

        def visit(value: Any, name: str | None, write: bool, read: bool, into: dict) -> None:
            nonlocal device
            if not is_openreg(value):
                return
            ptr = value.untyped_storage().data_ptr()
            if ptr == 0:
                return
            device = device if device is not None else value.device
            (writes if write else reads).add(ptr) if (write or read) else None
            names.setdefault(ptr, [])
            if name is not None:
                names[ptr].append(name)

        schema = func._schema
        for i, argument in enumerate(schema.arguments):
            value = args[i] if i < len(args) else kwargs.get(argument.name)
            alias = argument.alias_info
            write = alias is not None and alias.is_write
            read = alias is None or alias.is_write  # a view reads no data
            pytree.tree_map_(lambda v, n=argument.name, w=write, r=read: visit(v, n, w, r, names), value)
        out = func(*args, **kwargs)
        outputs: set[int] = set()
        for result, value in zip(schema.returns, out if isinstance(out, tuple) else (out,), strict=False):
            fresh = result.alias_info is None  # a new tensor written by the kernel
            for leaf in pytree.tree_leaves(value):
                if is_openreg(leaf) and leaf.untyped_storage().data_ptr() != 0:
                    ptr = leaf.untyped_storage().data_ptr()
                    names.setdefault(ptr, [])
                    outputs.add(ptr)
                    device = device if device is not None else leaf.device
                    if fresh:
                        writes.add(ptr)
        if device is None:
            return out
        errors = self.handler._handle_kernel_launch(
            torch.openreg.current_stream(device).native_handle, reads - writes, writes, outputs, schema, names
        )
        if errors:
            raise StreamSyncError("openreg stream sanitizer:\n" + "\n".join(str(e) for e in errors))
        return out


@contextlib.contextmanager
def stream_sanitizer() -> Iterator[StreamSanitizerMode]:
    """Within the block, unsynchronized use of memory across openreg streams raises StreamSyncError."""
    with StreamSanitizerMode() as mode:
        yield mode
