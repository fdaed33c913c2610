"""Which path each operator call took on openreg, and the policy for the copying fallback.

Paths (csrc/aten/engine/Ledger.h): `native` (an openreg kernel), `async` (the generic engine's
asynchronous path), `sync` (its synchronizing path), `copying` (the classic copy-to-CPU
fallback; `copied_bytes` counts what it moved). The policy for the copying fallback is "allow",
"warn" or "error": OPENREG_FALLBACK sets it for the process, `fallback_policy` for a block of
code on this thread.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

from .. import _C

_POLICIES = {"allow": 0, "warn": 1, "error": 2}


def path_counts() -> dict[str, int]:
    """Calls per path since the process started, bytes copied by the copying fallback, and Meta
    kernel runs (`meta_calls`: the asynchronous path runs one only for a call signature it has not
    seen before)."""
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
        raise ValueError(f"openreg: fallback policy must be one of {sorted(_POLICIES)}, got {policy!r}")
    previous = _C._set_fallback_policy(_POLICIES[policy])
    try:
        yield
    finally:
        _C._set_fallback_policy(previous)


__all__ = ["count_paths", "fallback_policy", "path_counts"]
