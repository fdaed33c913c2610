"""inject_faults: planted failures through the error model real ones take, so that a library's
error handling can be tested on a CPU-only machine. See Note [Fault injection] in
csrc/core/FaultInjection.h.

- `oom_at=N`: the Nth allocation from now (every device) raises torch.OutOfMemoryError from the
  caching allocator; `num_ooms` counts it, and the device keeps working;
- `kernel_at=N`: the Nth kernel launched from now fails when it runs: its outputs are poisoned,
  and reading them, or the stream's next synchronization, raises RuntimeError "a task failed on
  device ...: <operator>: injected kernel failure ...";
- `lose_device=D`: device D is lost: every allocation on it raises at the call, and every kernel
  launched on it fails as above, until the injection ends.

Cost when not injecting: one relaxed atomic load per allocation and per kernel launch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from ... import _C
from ..._C import DEVICE_NAME


def set_faults(oom_at: int = 0, kernel_at: int = 0, lose_device: int | None = None) -> None:
    """Arms the faults from now (counters restart); all defaults disarm."""
    if oom_at < 0 or kernel_at < 0:
        raise ValueError(
            f"{DEVICE_NAME}: inject_faults: oom_at and kernel_at count from 1 (0 for none), got {oom_at}, {kernel_at}"
        )
    if lose_device is not None:
        import torch

        if not 0 <= lose_device < torch.openreg.device_count():
            raise ValueError(
                f"{DEVICE_NAME}: inject_faults: lose_device={lose_device} is not a device "
                f"(0..{torch.openreg.device_count() - 1})"
            )
    _C._set_fault_injection(oom_at, kernel_at, -1 if lose_device is None else lose_device)


@contextlib.contextmanager
def inject_faults(oom_at: int = 0, kernel_at: int = 0, lose_device: int | None = None) -> Iterator[None]:
    """Within the block, the faults given are armed (counted from the block's start); they are
    disarmed when it ends, however it ends."""
    set_faults(oom_at, kernel_at, lose_device)
    try:
        yield
    finally:
        set_faults()
