"""Every code citation in docs/ (`path#marker`) points at a file and marker that exist, and the
facts the docs state that the code can check (counts of tests, functions and operators, the
patches of torch) are the code's."""

import ast
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("OPENREG_CMAKE_BUILD_DIR", ROOT / "build" / "release"))


def test_every_cited_marker_exists():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_doc_markers.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 failed" in result.stdout


# --- facts the docs state that the code can check ----------------------------------------------

def doc_number(chapter: str, pattern: str) -> int:
    """The number a chapter states where `pattern` (with one group around the number) matches."""
    match = re.search(pattern, (ROOT / "docs" / chapter).read_text())
    assert match, f"docs/{chapter}: no sentence matches {pattern!r}"
    return int(match.group(1).replace(",", ""))


def test_the_count_of_runtime_tests_is_the_suites():
    binary = BUILD / "runtime" / "runtime_tests"
    if not binary.exists():
        pytest.skip(f"no runtime tests built in {BUILD}")
    listing = subprocess.run([str(binary), "--gtest_list_tests"], capture_output=True, text=True, check=True).stdout
    count = sum(1 for line in listing.splitlines() if line.startswith("  "))
    assert doc_number("runtime.md", r"`runtime/tests/` holds the GoogleTest suite: (\d+) tests") == count


def test_the_count_of_c_api_functions_is_the_headers():
    header = (ROOT / "runtime" / "include" / "openreg" / "runtime.h").read_text()
    declared = set(re.findall(r"OPENREG_RUNTIME_API[^;(]*?\b(or[A-Z]\w*)\(", header))
    assert doc_number("runtime.md", r"declares: (\d+), all C") == len(declared)


def test_the_count_of_operators_registered_one_by_one_is_the_engines():
    engine = (ROOT / "csrc" / "aten" / "engine" / "Engine.cpp").read_text()
    block = engine[engine.index("[marker: engine-explicit-registrations]") :]
    block = block[block.index("for (const char* name :") : block.index("}) {")]
    names = re.findall(r'"([\w.]+)"', block)
    assert doc_number("operators.md", r"(\d+) operators are registered to the engine one by one") == len(names)


def torch_patches() -> set[str]:
    """Every assignment in torch_openreg/ to an attribute of a module (or class) imported from torch,
    or to an item of a registry such a module holds (`fake_impls.op_implementations_dict[op] = f`)."""
    patched = set()
    for path in (ROOT / "torch_openreg").rglob("*.py"):
        tree = ast.parse(path.read_text())
        origin = {}  # local name -> what it names in torch
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.startswith("torch") and alias.asname:
                        origin[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch"):
                for alias in node.names:
                    origin[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Attribute):
                    target = target.value
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name):
                    base = target.value.id
                    if base in origin:
                        patched.add(f"{origin[base]}.{target.attr}")
                    elif base == "torch":
                        patched.add(f"torch.{target.attr}")
    return patched


def test_every_patch_of_torch_is_listed():
    design = (ROOT / "docs" / "design.md").read_text()
    section = design[design.index("## Patches of torch") :]
    listed = set(re.findall(r"^\| `(torch\.[\w.]+)` \|", section, re.MULTILINE))
    assert torch_patches() == listed
