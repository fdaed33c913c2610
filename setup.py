"""Builds torch_openreg with CMake (the same build as `make`), against the torch already installed.

Install with `pip install --no-build-isolation .` (or `-e .`): the build needs the installed torch's
headers and libraries, and an isolated build environment would fetch a different torch.
"""

import os
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


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
    cmdclass={"build_py": BuildWithCMake},
    package_data={"torch_openreg": ["*.so", "lib/*.so"]},
)
