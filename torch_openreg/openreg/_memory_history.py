"""Memory history of `torch.openreg`: `torch.openreg.memory._record_memory_history()`,
`_snapshot()` and `_dump_snapshot()`, in the format of `torch.cuda.memory`'s, which PyTorch's
memory visualizer (`torch.cuda._memory_viz`, pytorch.org/memory_viz) reads.

The allocator records each event (alloc, free_requested, free_completed, segment_alloc,
segment_free, oom) with its time, stream and stack while recording is on; see Note [Memory
history] in csrc/core/allocator/MemoryHistory.h. Off, the allocator pays one atomic load per
allocation and free."""

from __future__ import annotations

import pickle
import sys
from typing import Any, Literal

from .. import _C
from .._C import DEVICE_NAME


def _record_memory_history(
    enabled: Literal["state", "all"] | None = "all",
    context: Literal["all"] | None = "all",
    stacks: Literal["python", "all"] = "all",
    max_entries: int = sys.maxsize,
    device: Any = None,
    clear_history: bool = False,
) -> None:
    """Starts (`enabled="all"`: a trace of every allocator event, at most `max_entries`, oldest
    dropped first; `"state"`: only the stack of each live allocation) or stops (`None`) recording,
    on every openreg device (`device` is accepted for `torch.cuda` compatibility).

    `stacks="python"` records Python frames; `"all"` adds C++ frames, which cost an unwind per
    event and a symbolization (seconds, with addr2line) per snapshot. `context` must be `"all"`
    (every event has its stack) or `None` with `enabled=None`.
    """
    del device  # recording covers every device, as one allocator history
    if enabled not in ("state", "all", None):
        raise ValueError(
            f"{DEVICE_NAME}: _record_memory_history: enabled must be 'state', 'all' or None, got {enabled!r}"
        )
    if stacks not in ("python", "all"):
        raise ValueError(f"{DEVICE_NAME}: _record_memory_history: stacks must be 'python' or 'all', got {stacks!r}")
    if enabled is not None and context != "all":
        raise ValueError(
            f"{DEVICE_NAME}: _record_memory_history: context={context!r} is not supported; openreg records "
            "the stack of every event (context='all')"
        )
    if max_entries < 0:
        raise ValueError(f"{DEVICE_NAME}: _record_memory_history: max_entries must be >= 0, got {max_entries}")
    if clear_history:
        _C._clear_memory_history()
    if enabled is None:
        _C._record_memory_history(False, 0, False)
    else:
        _C._record_memory_history(True, max_entries if enabled == "all" else 0, stacks == "all")


def _snapshot(device: Any = None, augment_with_fx_traces: bool = False) -> dict[str, Any]:
    """`{"segments": [...], "device_traces": [[...] per device]}`: every segment with its blocks
    (each allocated block with the frames of its allocation, when recorded) and the recorded trace,
    as `torch.cuda.memory._snapshot()` returns them. `augment_with_fx_traces` adds the FX node
    of each frame of generated code, with the function torch.cuda uses (torch._utils)."""
    del device  # as torch.cuda: the snapshot covers every device
    snapshot = _C._memory_history_snapshot()
    if augment_with_fx_traces:
        from torch._utils import _augment_memory_snapshot_stack_traces

        snapshot = _augment_memory_snapshot_stack_traces(snapshot)
    return snapshot


def _dump_snapshot(filename: str = "dump_snapshot.pickle", augment_with_fx_traces: bool = False) -> None:
    """Pickles `_snapshot()` to `filename`, the file pytorch.org/memory_viz opens."""
    with open(filename, "wb") as f:
        pickle.dump(_snapshot(augment_with_fx_traces=augment_with_fx_traces), f)
