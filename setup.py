"""Builds torch_openreg with CMake (the same build as `make`), against the torch already installed.

Install with `pip install --no-build-isolation .` (or `-e .`): the build needs the installed torch's
headers and libraries, and an isolated build environment would fetch a different torch.

The wheel says what it holds (Note [The wheel's tag and torch pin]): CPython extension modules for
this interpreter and platform, built against one torch release.
"""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent

try:
    import torch
except ImportError as error:
    raise SystemExit(
        "torch_openreg builds against the torch that is installed, and none is importable here "
        f"({error}). Install torch first (2.13, 2.14 or 2.15), then build with "
        "`pip install --no-build-isolation .`."
    ) from error


# Note [The wheel's tag and torch pin]
# The package holds shared objects built by CMake for this CPython and platform, and linked against
# one torch release's C++ ABI; torch_openreg/__init__.py refuses to load under another minor
# release (Note [Build and runtime torch must match]). setuptools only sees a package with data
# files, so without help it tags the wheel py3-none-any and pip would install it anywhere. A
# distribution that reports extension modules gets the interpreter's tag (e.g.
# cp311-cp311-linux_x86_64; not manylinux: nothing audits the shared objects' symbols), and the
# dependency names the minor release of the build (torch>=2.14,<2.15 for a build against 2.14.1):
# the patch releases of a minor are cherry-picks that keep its C++ ABI, and the local label (+cpu,
# +cu130) names an accelerator flavour that shares libtorch_cpu's headers and ABI.
class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


def _load_compat():
    """torch_openreg/_compat.py on its own (the package is not built yet): its minor_release."""
    spec = importlib.util.spec_from_file_location("_openreg_compat", ROOT / "torch_openreg" / "_compat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TORCH_MAJOR, TORCH_MINOR = _load_compat().RUNNING
TORCH_REQUIREMENT = f"torch>={TORCH_MAJOR}.{TORCH_MINOR},<{TORCH_MAJOR}.{TORCH_MINOR + 1}"


def cmake_cache_value(build_dir: Path, name: str) -> str:
    for line in (build_dir / "CMakeCache.txt").read_text().splitlines():
        if line.startswith(name + ":"):
            return line.split("=", 1)[1]
    raise KeyError(f"{name} is not in {build_dir}/CMakeCache.txt")


# The CMake tree, and under it setuptools' own staging folders (build/lib, bdist, the egg-info with
# the torch requirement): two builds for different torch releases from one checkout, even at
# once, share nothing.
CMAKE_BUILD_DIR = Path(
    os.environ.get("OPENREG_CMAKE_BUILD_DIR", ROOT / "build" / f"python-{str(torch.__version__).split('+')[0]}")
)
STAGING = CMAKE_BUILD_DIR / "setuptools"
STAGING.mkdir(parents=True, exist_ok=True)


class BuildWithCMake(build_py):
    """Runs the CMake build, then copies the package with the shared objects it wrote.

    By default the build tree is build/python-<torch release> and CMake writes the shared objects
    and _build_info.py into that tree's package/ folder, so that building for one torch never
    overwrites what a build for another wrote. `make` builds with OPENREG_CMAKE_BUILD_DIR set to
    build/release, whose package directory is torch_openreg/ itself (the editable install).
    """

    def run(self) -> None:
        build_dir = CMAKE_BUILD_DIR
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call(
                [
                    "cmake", "-S", str(ROOT), "-B", str(build_dir),
                    "-DCMAKE_BUILD_TYPE=Release",
                    "-DOPENREG_BUILD_TORCH=ON",
                    "-DOPENREG_BUILD_TESTS=OFF",
                    "-DOPENREG_BUILD_BENCH=OFF",
                    f"-DOPENREG_PACKAGE_DIR={build_dir / 'package'}",
                    f"-DPython3_EXECUTABLE={sys.executable}",
                ]
            )
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "_C", "-j", str(os.cpu_count() or 1)]
        )
        super().run()
        package_dir = Path(cmake_cache_value(build_dir, "OPENREG_PACKAGE_DIR")).resolve()
        if package_dir != (ROOT / "torch_openreg").resolve() and not self.editable_mode:
            target = Path(self.build_lib) / "torch_openreg"
            for built in [package_dir / "_build_info.py", *package_dir.glob("*.so"), *package_dir.glob("lib/*.so")]:
                destination = target / built.relative_to(package_dir)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(built, destination)


setup(
    distclass=BinaryDistribution,
    install_requires=[TORCH_REQUIREMENT],
    cmdclass={"build_py": BuildWithCMake},
    package_data={"torch_openreg": ["*.so", "lib/*.so"]},
    options={"build": {"build_base": str(STAGING)}, "egg_info": {"egg_base": str(STAGING)}},
)
