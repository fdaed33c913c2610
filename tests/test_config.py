"""The registry of configuration variables (Note [Configuration variables] in
runtime/src/ConfigVariables.h): every variable openreg reads is declared there once, read through
it, refused the same way when invalid, printed by `python -m torch_openreg`, and tabled in the
README from it."""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from conftest import run_python
from torch_openreg import _C

ROOT = pathlib.Path(__file__).resolve().parent.parent
VARIABLES = {entry[0]: entry[1:] for entry in _C._config_variables()}  # name: reader, default, accepted, meaning


def test_the_registry_declares_each_variable_once_with_every_field():
    names = [entry[0] for entry in _C._config_variables()]
    assert len(names) == len(set(names)) == 17
    for name, (reader, default, accepted, meaning) in VARIABLES.items():
        assert re.fullmatch(r"(PYTORCH_)?(OPENREG_)?[A-Z_]+", name)
        assert reader in ("runtime", "PyTorch layer", "Python package"), name
        assert default and accepted and meaning, name


def test_the_readme_table_is_the_registrys():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import config_table
    finally:
        sys.path.pop(0)
    readme = (ROOT / "README.md").read_text()
    assert config_table.readme_table(readme) == config_table.table(), (
        "README.md's configuration table differs from the registry: run `python tools/config_table.py`"
    )


# An environment variable read by name: getenv("X"), os.environ.get("X"), os.environ["X"],
# os.getenv("X"). Our variables are read through the registry alone.
READ = re.compile(
    r"""(getenv|environ\.get|environ\[|os\.getenv)\(?\s*["']((PYTORCH_)?OPENREG_[A-Z_]+|PYTORCH_ALLOC_CONF)"""
)


def test_nothing_reads_an_openreg_variable_around_the_registry():
    readers = []
    for folder in ("runtime/src", "runtime/include", "csrc", "torch_openreg"):
        for path in (ROOT / folder).rglob("*"):
            if path.suffix not in (".h", ".hpp", ".cpp", ".py") or path.name == "ConfigVariables.cpp":
                continue
            readers += [f"{path.relative_to(ROOT)}: {m.group(0)}" for m in READ.finditer(path.read_text())]
    assert readers == []


def test_the_runtimes_values_in_effect_are_its_configurations():
    value, from_environment = _C._config_value("OPENREG_DEVICE_MEMORY")
    assert int(value) == torch.openreg.get_device_properties(0).total_memory
    assert from_environment == ("OPENREG_DEVICE_MEMORY" in os.environ)
    count, _ = _C._config_value("OPENREG_DEVICE_COUNT")
    assert int(count) == torch.openreg.device_count()
    assert _C._config_value("OPENREG_OPENMP_RELEASE")[0] in ("0", "1", "auto")


@pytest.mark.parametrize(
    "name, bad, expected",
    [
        ("OPENREG_DEBUG_NONFINITE", "yes", "expected 0 or 1."),
        ("OPENREG_STREAM_SANITIZER", "2", "expected 0 or 1."),
        ("OPENREG_FALLBACK", "bogus", "expected allow, warn or error."),
    ],
)
def test_an_invalid_value_above_the_runtime_is_a_value_error_naming_it(name, bad, expected, monkeypatch):
    assert _C._config_value(name) == (VARIABLES[name][1], False)  # the default, unset
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError) as info:
        _C._config_value(name)
    assert str(info.value) == f"openreg: invalid {name}='{bad}': {expected}"


def test_text_values_and_unknown_names(monkeypatch):
    monkeypatch.setenv("OPENREG_COPYING_OPS", "aten::mm")
    assert _C._config_value("OPENREG_COPYING_OPS") == ("aten::mm", True)
    monkeypatch.delenv("OPENREG_COPYING_OPS")
    assert _C._config_value("OPENREG_COPYING_OPS") == ("", False)
    with pytest.raises(ValueError, match="OPENREG_NO_SUCH is not a variable of openreg's"):
        _C._config_value("OPENREG_NO_SUCH")


def test_diagnostics_print_every_variable_with_its_value_and_source():
    env = {**os.environ, "OPENREG_QUEUE_DEPTH": "1024", "OPENREG_FALLBACK": "warn"}
    env.pop("OPENREG_COPYING_OPS", None)
    out = subprocess.run(
        [sys.executable, "-m", "torch_openreg"], env=env, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    for name in VARIABLES:
        assert f"  {name} " in out, name
    assert re.search(r"OPENREG_QUEUE_DEPTH +1024  \[environment\]", out)
    assert re.search(r"OPENREG_FALLBACK +warn  \[environment\]", out)
    assert re.search(r"OPENREG_COPYING_OPS +\(empty\)  \[default: empty\]", out)
    assert re.search(r"OPENREG_LAUNCH_BLOCKING +0  \[default: 0\]", out)


def test_an_invalid_debug_variable_refuses_the_import_naming_it():
    env = {"OPENREG_DEBUG_NONFINITE": "on", "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    result = run_python("import torch_openreg", env=env)
    assert result.returncode != 0
    assert "ValueError: openreg: invalid OPENREG_DEBUG_NONFINITE='on': expected 0 or 1." in result.stderr


def test_every_variable_is_refused_in_one_format():
    # The format every layer's refusal takes (orConfigRefuseValue), ACCEPTED from the registry.
    for name, (_, _, accepted, _) in VARIABLES.items():
        with pytest.raises(ValueError) as info:
            _C._refuse_config_value(name, "x", "why")
        assert str(info.value) == f"openreg: invalid {name}='x': why; expected {accepted}."
    with pytest.raises(ValueError, match="OPENREG_NO_SUCH is not a variable of openreg's"):
        _C._refuse_config_value("OPENREG_NO_SUCH", "x", "")


@pytest.mark.parametrize(
    "name, bad, reason",
    [
        ("OPENREG_DEBUG_COMPARE_CPU", "atol=abc", "atol takes a number, not 'abc'"),
        ("OPENREG_FAULT_INJECTION", "oom_at=-1", "oom_at and kernel_at count from 1 (0 for none), got -1, 0"),
        ("OPENREG_COPYING_OPS", "aten::no_such_op", "no aten operator named 'aten::no_such_op'"),
        ("PYTORCH_OPENREG_ALLOC_CONF", "max_split_size_mb", "'max_split_size_mb' is not key:value"),
        ("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:2", "'garbage_collection_threshold:2' is not a valid"),
    ],
)
def test_a_value_a_layer_parses_itself_is_refused_in_the_registrys_format(name, bad, reason):
    # The variables of free text: the layer that reads them parses them, and refuses through the registry.
    result = run_python("import torch; import torch_openreg; torch.empty(1, device='openreg')", env={name: bad})
    assert result.returncode != 0
    accepted = re.escape(VARIABLES[name][2])
    assert re.search(
        rf"ValueError: openreg: invalid {name}='{re.escape(bad)}': {re.escape(reason)}.*; expected {accepted}\.",
        result.stderr,
    ), result.stderr[-2000:]
