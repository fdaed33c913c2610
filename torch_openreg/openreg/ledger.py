"""Which path each operator call took on openreg, and the policy for the copying fallback.

Paths (csrc/aten/engine/Ledger.h): `native` (an openreg kernel), `async` (the generic engine's
asynchronous path), `sync` (its synchronizing path), `copying` (the classic copy-to-CPU
fallback; `copied_bytes` counts what it moved), `compiled` (a kernel Inductor compiled for an
openreg graph, launched on the stream: docs/compile.md). The policy for the copying fallback is "allow",
"warn" or "error": OPENREG_FALLBACK sets it for the process, `fallback_policy` for a block of
code on this thread.

Operators can also be routed to the copying fallback one by one (Note [Per-operator copying
fallback] in csrc/aten/engine/CopyingFallback.h): OPENREG_COPYING_OPS=aten::mm,aten::add.Tensor
for the process, `copying_fallback(...)` for a block of code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from .. import _C
from .._C import DEVICE_NAME

_POLICIES = {"allow": 0, "warn": 1, "error": 2}


def path_counts() -> dict[str, int]:
    """Calls per path since the process started, bytes copied by the copying fallback, Meta
    kernel runs (`meta_calls`: the asynchronous path runs one only for a call signature it has not
    seen before), CPU kernels run on the host to check a call (`check_kernels`: once per call
    signature at most), and the host's waits for the device (`synchronizations`). A steady
    training step counts none of the last three (docs/performance.md)."""
    return dict(_C._path_counts())


@contextlib.contextmanager
def count_paths() -> Iterator[dict[str, int]]:
    """Counts the paths taken inside the block: the dict it yields is filled in on exit."""
    before = path_counts()
    counts: dict[str, int] = {}
    try:
        yield counts
    finally:
        after = path_counts()
        counts.update({key: after[key] - before[key] for key in after})


@contextlib.contextmanager
def fallback_policy(policy: str) -> Iterator[None]:
    """Inside the block, a copying fallback on this thread is allowed, warns, or raises."""
    if policy not in _POLICIES:
        raise ValueError(f"{DEVICE_NAME}: fallback policy must be one of {sorted(_POLICIES)}, got {policy!r}")
    previous = _C._set_fallback_policy(_POLICIES[policy])
    try:
        yield
    finally:
        _C._set_fallback_policy(previous)


@contextlib.contextmanager
def copying_fallback(*ops: str) -> Iterator[None]:
    """Inside the block, the named aten operators ("aten::mm", "add.Tensor") run through the
    classic copying fallback instead of the engine: to compare the two on a wrong result, or to
    see what the engine saves. Process-wide, as dispatcher registrations are."""
    added = [op for op in ops if _canonical(op) not in operators_on_copying_fallback()]
    for op in added:
        _C._route_to_copying_fallback(op)
    try:
        yield
    finally:
        for op in added:
            _C._restore_from_copying_fallback(op)


def operators_on_copying_fallback() -> list[str]:
    """The operators routed to the copying fallback, as "aten::name.overload"."""
    return list(_C._operators_on_copying_fallback())


def _canonical(op: str) -> str:
    return op if "::" in op else f"aten::{op}"


# [marker: copying-ops-env]
def _route_from_environment() -> None:
    value = _C._config_value("OPENREG_COPYING_OPS")[0]
    for op in filter(None, value.split(",")):
        try:
            _C._route_to_copying_fallback(op.strip())
        except ValueError:
            _C._refuse_config_value("OPENREG_COPYING_OPS", value, f"no aten operator named {op.strip()!r}")


_route_from_environment()

__all__ = ["copying_fallback", "count_paths", "fallback_policy", "operators_on_copying_fallback", "path_counts"]
