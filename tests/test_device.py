"""Registration, autoload, device queries and selection, configuration, fork safety."""

import os
import re
import subprocess
import sys

import pytest
import torch

import torch_openreg
from conftest import run_python
from torch_openreg import _build_info

openreg = torch.openreg


def test_import_torch_alone_registers_openreg():
    result = run_python(
        """
        import torch
        print(torch._C._get_privateuse1_backend_name(), torch.openreg.device_count(),
              torch.accelerator.current_accelerator())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["openreg", "2", "openreg"]


def test_importing_the_package_before_torch_works():
    result = run_python("import torch_openreg, torch; print(torch.ones(2, device='openreg').cpu().tolist())")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[1.0, 1.0]"


def test_diagnostics_command_reports_devices_and_configuration():
    result = subprocess.run(
        [sys.executable, "-m", "torch_openreg"], capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "OPENREG_DEVICE_MEMORY": "128M"},
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"built against     torch {_build_info.TORCH_VERSION}" in out
    assert "openreg:1  OpenReg Emulated Device, 128.0 MiB" in out
    # The values in effect, from the runtime's registry (tests/test_config.py checks the rest).
    assert re.search(r"OPENREG_DEVICE_MEMORY +134217728  \[environment\]", out)
    assert re.search(r"OPENREG_LAUNCH_BLOCKING +0  \[default: 0\]", out)
    assert "initialized       False" in out


def test_a_failing_backend_does_not_break_import_torch():
    result = run_python(
        """
        import importlib.abc, sys

        class Broken(importlib.abc.MetaPathFinder):  # the package fails to import, as with a bad build
            def find_spec(self, name, path, target=None):
                if name == "torch_openreg":
                    raise ImportError("simulated: built for another torch")

        sys.meta_path.insert(0, Broken())
        import torch
        print(hasattr(torch, "openreg"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
    assert "torch_openreg could not be loaded" in result.stderr
    assert "simulated: built for another torch" in result.stderr


def test_autoload_can_be_disabled():
    result = run_python(
        "import torch; print(hasattr(torch, 'openreg'))",
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


def test_registration_is_reentrant_and_generates_methods():
    torch_openreg._register()
    torch_openreg._register()
    __import__("torch_openreg_autoload").load()
    assert torch.openreg is torch_openreg.openreg
    for owner in (torch.Tensor, torch.nn.Module, torch.UntypedStorage):
        assert hasattr(owner, "openreg"), owner
    assert hasattr(torch.Tensor, "is_openreg")
    assert torch.device("openreg:1").type == "openreg"


def _import_under(version: str):
    return run_python(
        f"""
        import torch
        torch.__version__ = {version!r}
        try:
            import torch_openreg
            print(torch.randn(2, device="openreg").device)
        except ImportError as e:
            print(e)
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )


def test_import_rejects_another_minor_release_of_torch():
    built = _build_info.TORCH_VERSION
    major, minor = (int(p) for p in built.split(".")[:2])
    for other in ("1.0.0", f"{major}.{minor + 1}.0", f"{major}.{minor - 1}.9"):
        result = _import_under(other)
        assert result.returncode == 0, result.stderr
        assert f"built against torch {built}" in result.stdout, result.stdout
        assert f"needs torch {major}.{minor}.x, but torch {other}" in result.stdout, result.stdout
        assert "pip install --no-build-isolation" in result.stdout


def test_import_accepts_every_patch_release_and_build_of_the_same_minor_release():
    # A 2.14.1 build runs on 2.14.0; the CUDA build of a release shares libtorch_cpu's ABI with +cpu.
    major, minor = _build_info.TORCH_VERSION.split(".")[:2]
    for same in (f"{major}.{minor}.0", f"{major}.{minor}.7", f"{major}.{minor}.0+cu130", f"{major}.{minor}.1+cpu"):
        result = _import_under(same)
        assert result.returncode == 0, result.stderr
        assert "openreg:0" in result.stdout, (same, result.stdout)


def test_device_queries_follow_the_configuration():
    assert openreg.is_available()
    assert openreg.device_count() == 2
    props = openreg.get_device_properties(1)
    assert props.name == openreg.get_device_name(1) == "OpenReg Emulated Device"
    assert props.memory_alignment == 4096
    assert props.total_memory >= 256 << 20
    assert openreg.get_device_capability() == (1, 0)
    assert openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]


def test_device_properties_are_attributes_as_torch_cuda_gives_them():
    # torchtitan's memory monitor reads get_device_properties(device).total_memory, as libraries do
    # with torch.cuda's; a dict made it raise AttributeError (found by make test-torchtitan).
    props = openreg.get_device_properties("openreg:1")
    assert (props.name, props.major, props.minor) == (openreg.get_device_name(1), *openreg.get_device_capability(1))
    assert props.total_memory == openreg.mem_get_info(1)[1]
    assert props.multi_processor_count == (os.cpu_count() or 1)
    assert props == torch.get_device_module("openreg").get_device_properties(1)


def test_environment_configures_devices():
    result = run_python(
        """
        import torch
        p = torch.openreg.get_device_properties(2)
        print(torch.openreg.device_count(), p.total_memory, p.worker_count)
        """,
        env={"OPENREG_DEVICE_COUNT": "3", "OPENREG_DEVICE_MEMORY": "64M", "OPENREG_STREAM_WORKERS": "2"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["3", str(64 << 20), "2"]


def test_set_device_and_device_context():
    openreg.set_device(1)
    assert openreg.current_device() == 1
    with openreg.device(0):
        assert openreg.current_device() == 0
        with openreg.device("openreg:1"):
            assert openreg.current_device() == 1
        assert openreg.current_device() == 0
    assert openreg.current_device() == 1
    with openreg.device(None):
        assert openreg.current_device() == 1
    openreg.set_device(torch.device("openreg:0"))
    assert openreg.current_device() == 0


def test_bad_device_index_names_the_device_count():
    with pytest.raises(RuntimeError, match=r"invalid device index 2: there are 2 openreg devices"):
        openreg.set_device(2)
    with pytest.raises(RuntimeError, match=r"invalid device index 9"):
        openreg.synchronize(9)
    with pytest.raises(RuntimeError, match=r"invalid device index 5"):
        torch.Stream(device="openreg:5")
    with pytest.raises(ValueError, match=r"expected an openreg device, got 'cpu'"):
        openreg.set_device("cpu")
    assert openreg.current_device() == 0


def test_torch_accelerator_drives_openreg():
    acc = torch.accelerator
    assert acc.current_accelerator() == torch.device("openreg")
    assert acc.is_available() and acc.device_count() == 2
    acc.set_device_index(1)
    assert acc.current_device_index() == 1 == openreg.current_device()
    with acc.device_index(0):
        assert openreg.current_device() == 0
    assert openreg.current_device() == 1
    acc.synchronize()
    acc.synchronize("openreg:0")
    capability = acc.get_device_capability("openreg:0")
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool} <= set(capability["supported_dtypes"])


def test_device_queries_do_not_initialize_and_fork_stays_safe():
    result = run_python(
        """
        import os, torch
        o = torch.openreg
        o.device_count(); o.is_available(); o.get_device_properties(1); o.current_device()
        print(o.is_initialized())
        pid = os.fork()
        if pid == 0:
            o.synchronize(); o._sleep(1); o.synchronize()
            os._exit(0 if o.is_initialized() else 1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "0"]


def test_fork_after_initialization_raises_a_clear_error():
    result = run_python(
        """
        import os, torch
        torch.openreg.init()
        pid = os.fork()
        if pid == 0:
            try:
                torch.openreg.synchronize()
            except RuntimeError as e:
                ok = "Cannot re-initialize OpenReg in forked subprocess" in str(e) and "spawn" in str(e)
                os._exit(0 if ok else 2)
            os._exit(1)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status), torch.openreg.is_initialized())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0", "True"]


def test_spawn_children_use_the_device(tmp_path):
    script = tmp_path / "spawn_child.py"
    script.write_text(
        "import multiprocessing as mp, torch\n"
        "def work(i):\n"
        "    torch.openreg.set_device(i)\n"
        "    torch.openreg._sleep(1)\n"
        "    torch.openreg.synchronize()\n"
        "    return torch.openreg.current_device()\n"
        "if __name__ == '__main__':\n"
        "    torch.openreg.init()\n"
        "    with mp.get_context('spawn').Pool(2) as pool:\n"
        "        print(pool.map(work, [0, 1]))\n"
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[0, 1]"
