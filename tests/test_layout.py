"""Facts written once and names that say which layer: the device's name comes from OR_DEVICE_NAME
(runtime.h) in C++ and from torch_openreg._C.DEVICE_NAME in Python, never typed as a literal; a
stream's name from OR_STREAM_NAME_FORMAT; and no file name repeats between the runtime and the
PyTorch layer (csrc/README.md, runtime/README.md, torch_openreg/README.md)."""

import ast
import pathlib
import re

import torch_openreg
from torch_openreg import _C

ROOT = pathlib.Path(__file__).resolve().parent.parent
CPP_FOLDERS = ("runtime/src", "runtime/include", "csrc", "torch_openreg/csrc")

# A C++ string literal that spells the device's name as a name: "openreg", "openreg: ...",
# "openreg:0". Not the custom operators' namespace ("openreg::") nor serialization keys ("openreg_").
CPP_NAME_LITERAL = re.compile(r'"openreg(?:"|: |:\d|:")')


def _cpp_code_lines():
    """(file, line number, code without its // comment) of every C++ line of the layers."""
    for folder in CPP_FOLDERS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".h", ".hpp", ".cpp"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("//", 1)[0]
                if not code.lstrip().startswith(("*", "/*")):
                    yield path.relative_to(ROOT), number, code


def test_the_device_name_is_one_constant_in_every_layer():
    assert _C.DEVICE_NAME == "openreg" == torch_openreg.openreg.__name__.rsplit(".", 1)[-1]
    header = (ROOT / "runtime/include/openreg/runtime.h").read_text()
    assert f'#define OR_DEVICE_NAME "{_C.DEVICE_NAME}"' in header
    typed = [
        f"{path}:{number}: {code.strip()}"
        for path, number, code in _cpp_code_lines()
        if "#define OR_DEVICE_NAME" not in code and CPP_NAME_LITERAL.search(code)
    ]
    assert typed == [], "use OR_DEVICE_NAME (runtime.h):\n" + "\n".join(typed)


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                ids.add(id(first.value))
    return ids


def test_the_package_spells_the_device_name_only_through_device_name():
    typed = []
    for path in sorted((ROOT / "torch_openreg").rglob("*.py")):
        tree = ast.parse(path.read_text())
        docstrings = _docstrings(tree)
        allowed = set()  # __all__ lists the submodule `openreg`, a module's name
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                allowed |= {id(c) for c in ast.walk(node.value) if isinstance(c, ast.Constant)}
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or not isinstance(node.value, str):
                continue
            if id(node) in docstrings or id(node) in allowed:
                continue
            text = node.value
            if text == "openreg" or (text.startswith("openreg:") and not text.startswith("openreg::")):
                typed.append(f"{path.relative_to(ROOT)}:{node.lineno}: {text[:60]!r}")
    assert typed == [], "use torch_openreg._C.DEVICE_NAME:\n" + "\n".join(typed)


def test_a_stream_is_named_by_one_format():
    header = (ROOT / "runtime/include/openreg/runtime.h").read_text()
    assert '#define OR_STREAM_NAME_FORMAT OR_DEVICE_NAME ":%d stream %u"' in header
    # A stream's name pieced together by hand.
    users = [f"{path}:{number}" for path, number, code in _cpp_code_lines() if '" stream "' in code]
    assert users == []


def test_no_file_name_repeats_between_the_runtime_and_the_pytorch_layer():
    runtime = {p.stem for p in (ROOT / "runtime/src").glob("*") if p.suffix in (".h", ".cpp")}
    torch_layer = {p.stem for p in (ROOT / "csrc").rglob("*") if p.suffix in (".h", ".cpp")}
    assert runtime & torch_layer == set()
