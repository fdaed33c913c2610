"""make test-abi's check of the process it tests (docs/runtime.md, "The C ABI").

Usage: PYTHONPATH=<package parent> python scripts/check_abi.py <package dir>

Asserts that importing torch loads torch_openreg from <package dir>, that the libopenreg the
process maps is that package's lib/libopenreg.so, built against LLVM's libc++ (NEEDED libc++.so.1,
not libstdc++), while libtorch_openreg beside it is built against libstdc++ as the torch wheel is,
and that both C++ standard libraries are loaded. Then it runs work across the boundary: a kernel,
a failing kernel whose exception type (a task failure's category) comes back through the C API,
and a profiled launch (task activity records).
"""

import subprocess
import sys
from pathlib import Path


def needed(library: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", str(library)], capture_output=True, text=True, check=True)
    return [line.split("[", 1)[1].rstrip("]") for line in out.stdout.splitlines() if "(NEEDED)" in line]


def mapped(soname: str) -> set[Path]:
    """The files mapped into this process under `soname` (libc++.so.1 maps libc++.so.1.0)."""
    paths = set()
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 6 and (Path(fields[5]).name + ".").startswith(soname + "."):
            paths.add(Path(fields[5]).resolve())
    return paths


def check(condition: bool, message: str) -> None:
    if not condition:
        sys.exit(f"check_abi: {message}")


def main() -> None:
    package = Path(sys.argv[1]).resolve()
    import torch  # autoloads torch_openreg

    import torch_openreg

    check(Path(torch_openreg.__file__).resolve().parent == package,
          f"torch_openreg came from {torch_openreg.__file__}, not {package}")
    runtime = package / "lib" / "libopenreg.so"
    backend = package / "lib" / "libtorch_openreg.so"
    check(mapped("libopenreg.so") == {runtime.resolve()},
          f"the process maps libopenreg.so from {mapped('libopenreg.so')}, not {runtime}")
    runtime_needs, backend_needs = needed(runtime), needed(backend)
    check("libc++.so.1" in runtime_needs and "libstdc++.so.6" not in runtime_needs,
          f"{runtime} needs {runtime_needs}: not a libc++ build")
    check("libstdc++.so.6" in backend_needs and "libc++.so.1" not in backend_needs
          and "libopenreg.so" in backend_needs,
          f"{backend} needs {backend_needs}: not a libstdc++ build linking libopenreg")
    check(bool(mapped("libc++.so.1")) and bool(mapped("libstdc++.so.6")),
          "both C++ standard libraries should be loaded")

    x = torch.arange(6.0).to("openreg")
    check(torch.equal((x * 2 + 1).cpu(), torch.arange(6.0) * 2 + 1), "a kernel gave a wrong result")
    # An IndexError raised by the CPU kernel on a worker: its category crosses the C API and
    # torch_openreg raises the same type (docs/errors.md).
    try:
        torch.index_select(x, 0, torch.tensor([7]).to("openreg")).cpu()
    except IndexError as e:
        check("out of range" in str(e), f"unexpected message: {e}")
    else:
        check(False, "an out-of-range index_select did not raise IndexError")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.PrivateUse1]) as prof:
        (x + 1).cpu()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.PrivateUse1]
    check(bool(kernels), "the profiler recorded no device activity")
    print(f"check_abi: torch_openreg from {package}: libopenreg needs {', '.join(runtime_needs[:3])}; "
          f"libtorch_openreg needs libstdc++.so.6; kernels, a task failure's category and "
          f"{len(kernels)} task activities crossed the C API")


if __name__ == "__main__":
    main()
