"""`torch.openreg.debug`: modes that find where a program goes wrong on the device
(docs/debugging.md). Each is a context manager, and an environment variable read when
`torch_openreg` is imported turns it on for the whole process (on the importing thread, and the
threads autograd runs backward on):

- compare every operator with the CPU: `compare_with_cpu(atol=0, rtol=0)`,
  `OPENREG_DEBUG_COMPARE_CPU=1` (or `atol=..,rtol=..`);
- the first NaN or Inf: `check_finite()`, `OPENREG_DEBUG_NONFINITE=1`;
- stream sanitizer: `stream_sanitizer()`, `OPENREG_STREAM_SANITIZER=1`;
- fault injection: `inject_faults(oom_at=, kernel_at=, lose_device=)`,
  `OPENREG_FAULT_INJECTION=oom_at=3,kernel_at=5,lose_device=1`.

Off, none of them costs anything per operator beyond one atomic load at allocations, frees,
event calls and kernel launches.
"""

from __future__ import annotations

from typing import Any

from ... import _C
from ._common import CpuMismatchError, DebugModeError, NonFiniteError, StreamSyncError
from .compare_cpu import CompareWithCpuMode, compare_with_cpu
from .faults import inject_faults, set_faults
from .memory_timeline import timeline, timeline_svg
from .nonfinite import CheckFiniteMode, check_finite
from .sanitizer import StreamSanitizerMode, stream_sanitizer

_from_environment: list[Any] = []  # modes entered at import, for the process's lifetime


_KINDS = {int: "a whole number", float: "a number"}


def _options(variable: str, value: str, allowed: dict[str, type]) -> dict[str, Any]:
    """`a=1,b=2` into {"a": 1, "b": 2}; "1" into {}. An invalid value raises ValueError in the
    registry's one format (orConfigRefuseValue), naming the variable."""
    if value.strip() in ("1", ""):
        return {}
    options = {}
    for item in value.split(","):
        key, _, text = item.partition("=")
        key = key.strip()
        if key not in allowed or not text:
            _C._refuse_config_value(
                variable, value, f"{item.strip()!r} is not one of {', '.join(f'{k}=' for k in allowed)}"
            )
        try:
            options[key] = allowed[key](text)
        except ValueError:
            _C._refuse_config_value(variable, value, f"{key} takes {_KINDS[allowed[key]]}, not {text!r}")
    return options


def _config(name: str) -> str:
    return _C._config_value(name)[0]


# [marker: debug-environment]
def _enable_from_environment() -> list[str]:
    """Enters the modes the environment asks for; returns their names."""
    enabled = []
    # Each value read through the runtime's registry of variables, which refuses an invalid one
    # (Note [Configuration variables] in runtime/src/ConfigVariables.h).
    value = _config("OPENREG_DEBUG_COMPARE_CPU")
    if value != "0":
        mode = CompareWithCpuMode(**_options("OPENREG_DEBUG_COMPARE_CPU", value, {"atol": float, "rtol": float}))
        _from_environment.append(mode.__enter__())
        enabled.append("compare_with_cpu")
    if _config("OPENREG_DEBUG_NONFINITE") == "1":
        _from_environment.append(CheckFiniteMode().__enter__())
        enabled.append("check_finite")
    if _config("OPENREG_STREAM_SANITIZER") == "1":
        _from_environment.append(StreamSanitizerMode().__enter__())
        enabled.append("stream_sanitizer")
    if value := _config("OPENREG_FAULT_INJECTION"):
        options = _options("OPENREG_FAULT_INJECTION", value, {"oom_at": int, "kernel_at": int, "lose_device": int})
        try:
            set_faults(**options)
        except ValueError as error:  # out of range: the same words as the function's, for the variable
            _C._refuse_config_value("OPENREG_FAULT_INJECTION", value, str(error).split(": ", 2)[-1])
        enabled.append("inject_faults")
    return enabled


__all__ = [
    "CheckFiniteMode",
    "CompareWithCpuMode",
    "CpuMismatchError",
    "DebugModeError",
    "NonFiniteError",
    "StreamSanitizerMode",
    "StreamSyncError",
    "check_finite",
    "compare_with_cpu",
    "inject_faults",
    "set_faults",
    "stream_sanitizer",
    "timeline",
    "timeline_svg",
]
