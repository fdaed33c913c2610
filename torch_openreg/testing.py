"""Running a library's own test suite on openreg: the device-spec files of transformers and diffusers.

`python -m torch_openreg.testing write-specs [DIR]` writes one spec file per library into DIR (the
working directory by default) and prints the environment variables that point each library's
testing_utils at openreg. docs/testing-libraries.md has the commands and what each library reads.
`python -m torch_openreg.testing pytorch-test-base` prints the file to give PyTorch's own
device-generic tests as TORCH_TEST_DEVICES (torch_openreg/pytorch_test_base.py).

Note [Device-spec files]
Both libraries import the spec by a module name taken from the variable's value: everything before
".py" (transformers' and diffusers' testing_utils.py, the `import_name` computed from
`*_TEST_DEVICE_SPEC`). So the value must be a bare file name, and pytest must run in the folder
that holds the file: "dir/spec.py" and an absolute path become the module names "dir/spec" and
"/abs/dir/spec", which no import finds. transformers also appends the file's folder to sys.path;
diffusers does not, so it finds the file through the working directory on sys.path, which
`python -m pytest` puts there and the `pytest` script does not.

Each library reads its own set of names and falls back to its defaults for the rest, so each file
defines exactly the names its library reads. Neither format has a name for synchronize:
transformers' and diffusers' BACKEND_SYNCHRONIZE gain no entry from a spec, so their synchronize
stays a no-op for openreg in those tables (diffusers' TorchDeviceBackend, which the tests call
through its torch_utils, finds torch.openreg.synchronize by itself through
torch.get_device_module). Each file imports torch_openreg itself, so it works whether or not torch
autoloads the backend (TORCH_DEVICE_BACKEND_AUTOLOAD=0); without autoload, *_TEST_BACKEND=torch_openreg
is what registers the device in time, since transformers parses TRANSFORMERS_TEST_DEVICE with
torch.device before it imports the spec.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from ._C import DEVICE_NAME


@dataclass(frozen=True)
class Spec:
    library: str
    prefix: str  # of the library's variables: <prefix>_TEST_BACKEND, _TEST_DEVICE, _TEST_DEVICE_SPEC
    file_name: str
    names: tuple[tuple[str, str], ...]  # (name the library reads, its value in the file)

    def environment(self) -> dict[str, str]:
        return {
            f"{self.prefix}_TEST_BACKEND": "torch_openreg",
            f"{self.prefix}_TEST_DEVICE": DEVICE_NAME,
            f"{self.prefix}_TEST_DEVICE_SPEC": self.file_name,
        }

    def text(self) -> str:
        assignments = "\n".join(f"{name} = {value}" for name, value in self.names)
        return (
            f'"""The {self.library} device spec for openreg ({self.prefix}_TEST_DEVICE_SPEC={self.file_name}),\n'
            f"written by `python -m torch_openreg.testing write-specs`. Run pytest (as `python -m pytest`)\n"
            f'in this folder; see docs/testing-libraries.md in the openreg repository."""\n\n'
            f"import torch\n\n"
            f"import torch_openreg  # noqa: F401  (registers the device whether or not torch autoloads it)\n\n"
            f'DEVICE_NAME = "{DEVICE_NAME}"\n{assignments}\n'
        )


# [marker: testing-spec-names]
# The names each library's testing_utils.py reads from the spec (its update_mapping_from_spec calls
# and, for transformers, SINGLE_PROCESS_DEVICE), in the order it reads them.
SPECS = (
    Spec(
        library="transformers",
        prefix="TRANSFORMERS",
        file_name="openreg_transformers_spec.py",
        names=(
            ("MANUAL_SEED_FN", "torch.openreg.manual_seed"),
            ("EMPTY_CACHE_FN", "torch.openreg.empty_cache"),
            ("DEVICE_COUNT_FN", "torch.openreg.device_count"),
            # Tests decorated @run_test_using_subprocess run in a child process: openreg opens in
            # any number of processes, so it is not a device locked to one (TPU is).
            ("SINGLE_PROCESS_DEVICE", "False"),
        ),
    ),
    Spec(
        library="diffusers",
        prefix="DIFFUSERS",
        file_name="openreg_diffusers_spec.py",
        names=(
            ("MANUAL_SEED_FN", "torch.openreg.manual_seed"),
            ("EMPTY_CACHE_FN", "torch.openreg.empty_cache"),
            ("DEVICE_COUNT_FN", "torch.openreg.device_count"),
            ("SUPPORTS_TRAINING", "True"),
            ("RESET_PEAK_MEMORY_STATS_FN", "torch.openreg.reset_peak_memory_stats"),
            # CUDA's reset_max_memory_allocated is a deprecated alias of this (diffusers' torch_utils
            # maps it so too); openreg's warns as CUDA's does.
            ("RESET_MAX_MEMORY_ALLOCATED_FN", "torch.openreg.reset_peak_memory_stats"),
            ("MAX_MEMORY_ALLOCATED_FN", "torch.openreg.max_memory_allocated"),
        ),
    ),
)


def write_specs(directory: str | os.PathLike = ".") -> dict[str, Path]:
    """Writes every library's spec file into `directory` (made if missing); returns library -> path.
    Overwrites files of the same names."""
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for spec in SPECS:
        path = folder / spec.file_name
        path.write_text(spec.text())
        written[spec.library] = path
    return written


def environment() -> dict[str, str]:
    """Every library's variables, for a process whose working directory holds the spec files."""
    variables = {}
    for spec in SPECS:
        variables.update(spec.environment())
    return variables


def _main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m torch_openreg.testing", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    write = commands.add_parser("write-specs", help="write the device-spec files and print the variables to set")
    write.add_argument("directory", nargs="?", default=".", help="where to write them (default: the working directory)")
    commands.add_parser(
        "pytorch-test-base", help="print the file that gives PyTorch's own device-generic tests openreg's test base"
    )
    args = parser.parse_args(argv)
    if args.command == "pytorch-test-base":
        from .pytorch_test_base import PATH

        print(PATH)  # for TORCH_TEST_DEVICES (docs/conformance.md)
        return 0

    written = write_specs(args.directory)
    for library, path in written.items():
        print(f"wrote {path} ({library})")
    print(f"\nRun each library's tests with `python -m pytest` in {Path(args.directory).resolve()}, with:")
    for spec in SPECS:
        print(f"\n# {spec.library}")
        for name, value in spec.environment().items():
            print(f"export {name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
