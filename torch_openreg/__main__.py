"""`python -m torch_openreg`: what this openreg installation is and how it is configured.

Prints the versions (torch, the build's torch, the runtime), each device with its properties and
memory, and every configuration variable of the runtime's registry with the value in effect and where
it came from. Queries only: it initializes
no device, so it is safe to run anywhere, even before a fork."""

import os
import sys

import torch

import torch_openreg
from torch_openreg import _C, _build_info


def _mib(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def report() -> str:
    runtime = _C._runtime_version()
    lines = [
        "openreg diagnostics",
        f"  python            {sys.version.split()[0]} ({sys.executable})",
        f"  torch             {torch.__version__} (C++11 ABI {bool(torch._C._GLIBCXX_USE_CXX11_ABI)})",
        f"  built against     torch {_build_info.TORCH_VERSION} (C++11 ABI {_build_info.CXX11_ABI})",
        f"  torch_openreg     {os.path.dirname(torch_openreg.__file__)}",
        f"  libopenreg        {runtime // 1000}.{runtime % 1000}",
        f"  accelerator       {torch.accelerator.current_accelerator()}",
        f"  initialized       {torch.openreg.is_initialized()}",
        "",
        f"devices: {torch.openreg.device_count()}",
    ]
    for index in range(torch.openreg.device_count()):
        p = torch.openreg.get_device_properties(index)
        lines.append(
            f"  openreg:{index}  {p.name}, {_mib(p.total_memory)}, {p.worker_count} worker(s), "
            f"capability {p.major}.{p.minor}, alignment {p.memory_alignment} B"
        )
        if torch.openreg.is_initialized():
            free, total = torch.openreg.mem_get_info(index)
            lines.append(
                f"             free {_mib(free)} of {_mib(total)}; allocated "
                f"{_mib(torch.openreg.memory_allocated(index))}, reserved {_mib(torch.openreg.memory_reserved(index))}"
            )
    lines += ["", "configuration (runtime/src/ConfigVariables.cpp; the runtime's read once, at the first use):"]
    for name, reader, default, _accepted, meaning in _C._config_variables():
        try:
            value, from_environment = _C._config_value(name)
            source = "environment" if from_environment else f"default: {default}"
            shown = f"{value if value else '(empty)'}  [{source}]"
        except (RuntimeError, ValueError) as error:
            shown = f"invalid: {error}"
        lines.append(f"  {name:<28} {shown}")
        lines.append(f"  {'':<28} {reader}: {meaning}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
