"""The installed package, used the way a user uses it: tests/test_wheel.py copies this file into a
directory outside the checkout and runs it with pytest in a fresh environment where the wheel is
installed (`make test-wheel`, which `make test` runs). Not collected by the suite in tests/ (the
name does not start with test_): in the checkout, `torch_openreg` is the source tree.

Each test runs what a new user runs first: `import torch` alone loads the backend, every module
of the package imports, a training step equals the CPU's bit for bit, torch.compile, a 2-rank
all-reduce, and `python -m torch_openreg`.
"""

import datetime
import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import torch  # autoloads torch_openreg through its torch.backends entry point
import torch.distributed as dist
import torch.multiprocessing as mp

SITE = Path(sysconfig.get_paths()["platlib"]).resolve()


def test_import_torch_alone_loads_openreg_from_site_packages():
    assert "torch_openreg" in sys.modules, "the torch.backends entry point did not load torch_openreg"
    import torch_openreg

    assert Path(torch_openreg.__file__).resolve().is_relative_to(SITE), torch_openreg.__file__
    assert torch._C._get_privateuse1_backend_name() == "openreg"
    assert torch.openreg.is_available() and torch.openreg.device_count() >= 1
    assert torch.accelerator.current_accelerator().type == "openreg"


# The package's integrations with other libraries (docs/ecosystem.md): subpackage -> the library.
_INTEGRATIONS = {"lightning": "lightning", "deepspeed": "deepspeed", "transformers": "transformers", "vllm": "vllm"}


def test_every_module_of_the_package_imports():
    import torch_openreg

    names = [m.name for m in pkgutil.walk_packages(torch_openreg.__path__, "torch_openreg.")]
    # The folders of the tree (a subpackage the wheel leaves out fails here or in the import).
    for required in ("torch_openreg.openreg", "torch_openreg.openreg.debug", "torch_openreg._compile"):
        assert required in names, (required, names)
    for name in names:
        if name == "torch_openreg.__main__":
            continue  # runs the report on import; the last test runs it as a program
        library = _INTEGRATIONS.get(name.split(".")[1])
        if library is not None and importlib.util.find_spec(library) is None:
            # An integration with a library this environment lacks says which library it needs.
            with pytest.raises(ModuleNotFoundError) as missing:
                importlib.import_module(name)
            assert missing.value.name == library, missing.value
            continue
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().is_relative_to(SITE), module.__file__


def _train(device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data = torch.randn(32, 8, generator=torch.Generator().manual_seed(1)).to(device)
    target = torch.randint(0, 3, (32,), generator=torch.Generator().manual_seed(2)).to(device)
    for _ in range(3):
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(data), target).backward()
        optimizer.step()
    return [p.detach().cpu() for p in model.parameters()]


def test_a_training_step_equals_the_cpu_bit_for_bit():
    for on_openreg, on_cpu in zip(_train("openreg"), _train("cpu"), strict=True):
        assert torch.equal(on_openreg, on_cpu), (on_openreg - on_cpu).abs().max()


def test_torch_compile_runs_inductor_kernels_on_openreg():
    def f(x, y):
        return torch.nn.functional.gelu(x @ y + 1).sum(dim=0)

    x, y = torch.randn(16, 16), torch.randn(16, 16)
    compiled = torch.compile(f, backend="inductor")
    result = compiled(x.to("openreg"), y.to("openreg"))
    assert result.device.type == "openreg"
    torch.testing.assert_close(result.cpu(), f(x, y))


def _all_reduce(rank: int, world_size: int, init_file: str) -> None:
    # Gloo (under occl) on the loopback interface: the host name of a build or CI machine may not
    # resolve to an address the two ranks can reach each other on.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group(init_method=f"file://{init_file}", rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=120))
    torch.openreg.set_device(rank % torch.openreg.device_count())
    tensor = torch.full((4,), float(rank + 1), device="openreg")
    dist.all_reduce(tensor)
    assert dist.get_backend() != "gloo" and tensor.device.type == "openreg"
    assert tensor.cpu().tolist() == [3.0] * 4, tensor
    # Destroyed right after the collective: this once deadlocked (Note [Destroyed without the GIL]).
    dist.destroy_process_group()


def test_a_two_rank_all_reduce_on_occl(tmp_path):
    mp.spawn(_all_reduce, args=(2, str(tmp_path / "init")), nprocs=2, join=True)


def test_python_m_torch_openreg_reports_the_installation():
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run([sys.executable, "-m", "torch_openreg"], capture_output=True, text=True, timeout=300,
                            env=env, check=False)
    assert result.returncode == 0, result.stderr
    assert torch.__version__ in result.stdout, result.stdout
    assert "openreg:0" in result.stdout, result.stdout


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))
