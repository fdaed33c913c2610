"""The version gates (Note [Version gates] in torch_openreg/_compat.py): every gate in the tree,
C++ and Python, names a release inside the supported window, and the two halves agree on it."""

import re
from pathlib import Path

import torch

from torch_openreg import _build_info, _compat

ROOT = Path(__file__).resolve().parent.parent
CPP_GATE = re.compile(r"OPENREG_TORCH_BEFORE\((\d+),\s*(\d+)\)")
PY_GATE = re.compile(r"torch_before\((\d+),\s*(\d+)\)")


def gates() -> list[tuple[str, tuple[int, int]]]:
    found = []
    for pattern, files in (
        (CPP_GATE, [*ROOT.glob("csrc/**/*.[ch]*"), *ROOT.glob("torch_openreg/csrc/**/*.[ch]*")]),
        (PY_GATE, [*ROOT.glob("torch_openreg/**/*.py"), *ROOT.glob("tests/**/*.py")]),
    ):
        for path in files:
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if "#define" in line or line.lstrip().startswith("def "):
                    continue  # the gates' definitions
                where = f"{path.relative_to(ROOT)}:{number}"
                found += [(where, (int(m[1]), int(m[2]))) for m in pattern.finditer(line)]
    return found


def test_every_gate_names_a_release_inside_the_supported_window():
    # A gate at or below the oldest release is always false (its branch is dead); one above the
    # newest is always true (it is no gate). Either is deleted, or the window moved.
    outside = [(where, version) for where, version in gates() if not _compat.OLDEST < version <= _compat.NEWEST]
    assert not outside, f"gates outside ({_compat.OLDEST}, {_compat.NEWEST}]: {outside}"


def test_the_cpp_and_python_windows_agree():
    header = (ROOT / "csrc" / "compat" / "TorchVersion.h").read_text()
    value = {m[1]: int(m[2]) for m in re.finditer(r"#define OPENREG_TORCH_(\w+) (\d+)", header)}
    assert (value["OLDEST_MAJOR"], value["OLDEST_MINOR"]) == _compat.OLDEST
    assert (value["NEWEST_MAJOR"], value["NEWEST_MINOR"]) == _compat.NEWEST


def test_the_running_torch_is_the_build_s_minor_release_and_inside_the_window():
    assert _compat.OLDEST <= _compat.RUNNING <= _compat.NEWEST, torch.__version__
    assert _build_info.TORCH_VERSION.split(".")[:2] == [str(part) for part in _compat.RUNNING]


def test_torch_before_compares_minor_releases():
    assert not _compat.torch_before(*_compat.RUNNING)
    assert _compat.torch_before(_compat.RUNNING[0], _compat.RUNNING[1] + 1)
    assert not _compat.torch_before(_compat.RUNNING[0], _compat.RUNNING[1] - 1)
