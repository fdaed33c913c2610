"""Helpers of the ecosystem suite (`make test-ecosystem`): running a training script in a fresh
interpreter and comparing its results with the CPU's."""

import os
import pathlib
import subprocess
import sys

import torch

HERE = pathlib.Path(__file__).resolve().parent


def run_script(script: str, *args: str, env: dict | None = None, timeout: int = 600) -> None:
    """Runs tests/ecosystem/`script` with `args` in a fresh interpreter (or `-m module` with args,
    from that folder); fails with its output."""
    command = [sys.executable, script, *args] if script == "-m" else [sys.executable, str(HERE / script), *args]
    result = subprocess.run(
        command,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=HERE,
    )
    assert result.returncode == 0, f"{script} {args} failed:\n{result.stdout[-4000:]}\n{result.stderr[-8000:]}"


def assert_same_tensors(got: dict, expected: dict) -> None:
    """Bitwise equality of two {name: tensor} dictionaries (same names, dtypes, shapes, values)."""
    assert got.keys() == expected.keys()
    for name, value in expected.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        assert torch.equal(got[name], value), f"{name}: max difference {(got[name] - value).abs().max()}"
