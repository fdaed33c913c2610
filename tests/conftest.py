"""Shared helpers for the openreg Python tests. CPU is the oracle; these helpers run code in
fresh interpreters where a test needs its own environment or process state (fork, autoload)."""

import contextlib
import gc
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import torch_openreg  # noqa: F401  (explicit import: the tests also run with autoload disabled)


def run_python(code: str, env: dict | None = None, timeout: int = 120) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter with the test's environment plus `env`."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@contextlib.contextmanager
def settled_memory():
    """For a test that compares memory_allocated() before and after a call: earlier tests' tensors
    in reference cycles are collected and their stream-ordered frees retired first, and no garbage
    collection runs inside (one freed 1,536 bytes mid-measurement on a loaded machine)."""
    gc.collect()
    torch.openreg.synchronize()
    torch.empty(1, device="openreg")  # freed at once: the allocation retires completed frees
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(autouse=True)
def restore_current_device():
    """Each test starts on device 0 with default streams, and leaves no work running."""
    yield
    for index in range(torch.openreg.device_count()):
        torch.openreg.set_stream(torch.openreg.default_stream(index))
    torch.openreg.set_device(0)
    if torch.openreg.is_initialized():
        for index in range(torch.openreg.device_count()):
            torch.openreg.synchronize(index)


def assert_snapshot_is_reserved(device: int = 0) -> list:
    """memory_snapshot()'s segments of `device`, checked to add up to memory_reserved(): every
    test that takes a snapshot checks that it accounts for every reserved byte."""
    segments = [s for s in torch.openreg.memory_snapshot() if s["device"] == device]
    assert sum(s["total_size"] for s in segments) == torch.openreg.memory_reserved(device)
    return segments
