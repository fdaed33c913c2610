"""torch_openreg.testing: the device-spec files for transformers' and diffusers' test suites act on
openreg when imported the way each library imports them (Note [Device-spec files])."""

import importlib
import subprocess
import sys

import pytest
import torch

import torch_openreg
from conftest import run_python
from torch_openreg import testing


@pytest.fixture
def specs(tmp_path, monkeypatch):
    """The spec modules as a library's testing_utils gets them: the variable holds a bare file name,
    the working directory is the folder that holds it, and the module name is the name minus .py."""
    written = testing.write_specs(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    modules = {}
    for spec in testing.SPECS:
        variable = spec.environment()[f"{spec.prefix}_TEST_DEVICE_SPEC"]
        assert (tmp_path / variable).is_file() and written[spec.library].name == variable
        name = variable[: variable.index(".py")]
        sys.modules.pop(name, None)
        modules[spec.library] = importlib.import_module(name)
    yield modules
    for spec in testing.SPECS:
        sys.modules.pop(spec.file_name[: -len(".py")], None)


def test_each_spec_defines_exactly_the_names_its_library_reads(specs):
    for spec in testing.SPECS:
        module = specs[spec.library]
        assert module.DEVICE_NAME == "openreg" == torch_openreg.DEVICE_NAME
        defined = {n for n in vars(module) if n.isupper()}
        assert defined == {"DEVICE_NAME", *(name for name, _ in spec.names)}


def test_manual_seed_fn_reproduces_randn_on_openreg(specs):
    for module in specs.values():
        module.MANUAL_SEED_FN(1234)
        first = torch.randn(64, device="openreg")
        torch.randn(7, device="openreg")
        module.MANUAL_SEED_FN(1234)
        again = torch.randn(64, device="openreg")
        assert torch.equal(first.cpu(), again.cpu())
        module.MANUAL_SEED_FN(4321)
        assert not torch.equal(torch.randn(64, device="openreg").cpu(), first.cpu())


def test_device_count_fn_is_openregs(specs):
    for module in specs.values():
        assert module.DEVICE_COUNT_FN() == torch.openreg.device_count() >= 1


def test_empty_cache_fn_releases_openregs_cached_memory(specs):
    for module in specs.values():
        block = torch.empty(8 << 20, dtype=torch.uint8, device="openreg")
        del block
        torch.openreg.synchronize()
        assert torch.openreg.memory_reserved() >= 8 << 20
        module.EMPTY_CACHE_FN()
        assert torch.openreg.memory_reserved() < 8 << 20


def test_diffusers_memory_fns_track_openregs_peak(specs):
    module = specs["diffusers"]
    module.RESET_PEAK_MEMORY_STATS_FN()
    base = torch.openreg.memory_allocated()
    block = torch.empty(4 << 20, dtype=torch.uint8, device="openreg")
    assert module.MAX_MEMORY_ALLOCATED_FN() >= base + (4 << 20)
    del block
    torch.openreg.synchronize()
    module.RESET_MAX_MEMORY_ALLOCATED_FN()
    assert module.MAX_MEMORY_ALLOCATED_FN() < base + (4 << 20)
    assert module.SUPPORTS_TRAINING is True


def test_write_specs_command_writes_both_files_and_prints_the_variables(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "torch_openreg.testing", "write-specs", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for spec in testing.SPECS:
        assert (tmp_path / spec.file_name).is_file()
        for name, value in spec.environment().items():
            assert f"export {name}={value}" in result.stdout


def test_transformers_testing_utils_takes_the_spec_without_autoload(tmp_path):
    """transformers' own loader, with torch's autoload off: the backend variable and the spec's own
    import register the device before testing_utils checks TRANSFORMERS_TEST_DEVICE."""
    pytest.importorskip("transformers")
    testing.write_specs(tmp_path)
    env = {k: v for k, v in testing.environment().items() if k.startswith("TRANSFORMERS_")}
    env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    result = run_python(
        f"""
        import os
        os.chdir({str(tmp_path)!r})
        import torch
        from transformers import testing_utils as t
        assert t.torch_device == "openreg", t.torch_device
        assert t.backend_device_count("openreg") == torch.openreg.device_count()
        t.backend_manual_seed("openreg", 7)
        a = torch.randn(16, device="openreg")
        t.backend_manual_seed("openreg", 7)
        assert torch.equal(a.cpu(), torch.randn(16, device="openreg").cpu())
        t.backend_empty_cache("openreg")
        print("ok")
        """,
        env=env,
    )
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr
