"""`python -m torch_openreg`: what this openreg installation is and how it is configured.

Prints the versions (torch, the build's torch, the runtime), each device with its properties and
memory, and every configuration variable with the value in effect. Queries only: it initializes
no device, so it is safe to run anywhere, even before a fork."""

import os
import sys

import torch

import torch_openreg
from torch_openreg import _C, _build_info

# Each variable, its default, and what it sets (see README.md).
CONFIGURATION = [
    ("OPENREG_DEVICE_COUNT", "2", "number of devices"),
    ("OPENREG_DEVICE_MEMORY", "1/4 of physical memory", "capacity of each device"),
    ("OPENREG_STREAM_WORKERS", "1", "worker threads per device"),
    ("OPENREG_WORKER_SPIN_US", "50", "spin before an idle worker or a waiting host sleeps"),
    ("OPENREG_LAUNCH_BLOCKING", "0", "1: every launch completes before returning"),
    ("OPENREG_FAULT_HANDLER", "1", "0: no report of host access to device memory"),
    ("OPENREG_DEBUG_COMPARE_CPU", "0", "1: every operator checked against the CPU (at import)"),
    ("OPENREG_DEBUG_NONFINITE", "0", "1: the first NaN or Inf raises (at import)"),
    ("OPENREG_STREAM_SANITIZER", "0", "1: unsynchronized stream use raises (at import)"),
    ("OPENREG_FAULT_INJECTION", "empty", "planted failures, e.g. oom_at=3 (at import)"),
    ("PYTORCH_OPENREG_ALLOC_CONF", "empty", "caching allocator settings (wins over PYTORCH_ALLOC_CONF)"),
    ("PYTORCH_ALLOC_CONF", "empty", "allocator settings shared by every accelerator"),
    ("TORCH_DEVICE_BACKEND_AUTOLOAD", "1", "0: import torch does not load openreg"),
]


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
            f"  openreg:{index}  {p['name']}, {_mib(p['total_memory'])}, {p['worker_count']} worker(s), "
            f"capability {p['major']}.{p['minor']}, alignment {p['memory_alignment']} B"
        )
        if torch.openreg.is_initialized():
            free, total = torch.openreg.mem_get_info(index)
            lines.append(
                f"             free {_mib(free)} of {_mib(total)}; allocated "
                f"{_mib(torch.openreg.memory_allocated(index))}, reserved {_mib(torch.openreg.memory_reserved(index))}"
            )
    lines += ["", "configuration (read once, at the first use):"]
    for name, default, meaning in CONFIGURATION:
        value = os.environ.get(name)
        shown = value if value is not None else f"(unset: {default})"
        lines.append(f"  {name:<30} {shown:<28} {meaning}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(report())
