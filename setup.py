"""Builds torch_openreg with CMake (the same build as `make`), against the torch already installed.

Install with `pip install --no-build-isolation .` (or `-e .`): the build needs the installed torch's
headers and libraries, and an isolated build environment would fetch a different torch.

The wheel says what it holds (Note [The wheel's tag and torch pin]): CPython extension modules for
this interpreter and platform, built against one torch release.
"""

import os
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
        f"({error}). Install torch 2.13.0 first, then build with `pip install --no-build-isolation .`."
    ) from error


# Note [The wheel's tag and torch pin]
# The package holds shared objects built by CMake for this CPython and platform, and linked against
# one torch's C++ ABI; torch_openreg/__init__.py refuses to load under any other torch. setuptools
# only sees a package with data files, so without help it tags the wheel py3-none-any and pip would
# install it anywhere. A distribution that reports extension modules gets the interpreter's tag
# (e.g. cp311-cp311-linux_x86_64; not manylinux: nothing audits the shared objects' symbols), and
# the dependency names the torch release of the build, without the local label (+cpu), which a
# requirement on a release leaves free anyway.
class BinaryDistribution(Distribution):
    def has_ext_modules(self) -> bool:
        return True


TORCH_RELEASE = str(torch.__version__).split("+")[0]


class BuildWithCMake(build_py):
    """Runs the CMake build (which writes the shared objects into torch_openreg/) before copying."""

    def run(self) -> None:
        import torch.utils

        build_dir = Path(os.environ.get("OPENREG_CMAKE_BUILD_DIR", ROOT / "build" / "python"))
        if not (build_dir / "CMakeCache.txt").exists():
            subprocess.check_call(
                [
                    "cmake", "-S", str(ROOT), "-B", str(build_dir),
                    "-DCMAKE_BUILD_TYPE=Release",
                    "-DOPENREG_BUILD_TORCH=ON",
                    "-DOPENREG_BUILD_TESTS=OFF",
                    "-DOPENREG_BUILD_BENCH=OFF",
                    f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
                    f"-DPython3_EXECUTABLE={sys.executable}",
                ]
            )
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "_C", "-j", str(os.cpu_count() or 1)]
        )
        super().run()


setup(
    distclass=BinaryDistribution,
    install_requires=[f"torch=={TORCH_RELEASE}"],
    cmdclass={"build_py": BuildWithCMake},
    package_data={"torch_openreg": ["*.so", "lib/*.so"]},
)
