#!/usr/bin/env python3
"""diffusers' own model and pipeline tests, each file run on the CPU and on openreg, compared test by test.

    python tests/libraries/diffusers_suite.py --tests DIFFUSERS_TESTS --work build/libraries/diffusers \
        [--files unet_2d_condition,dit_transformer2d,dit_pipeline]

`make test-libraries-diffusers` runs it in .venv-libraries/ (docs/testing-libraries.md), against the
diffusers release installed there. The test tree is WORK/tree/tests, copied from the test folder
(Note [diffusers' test tree]); torch_openreg.testing writes the spec files into WORK/tree, and each
test file runs twice, each in its own pytest process in WORK/tree, with DIFFUSERS_TEST_DEVICE=cpu,
then with the openreg spec, and the two are compared test by test (library_suite.py, compare.py).

Note [diffusers' test tree]
Neither the wheel nor the sdist has the tests: the 0.42.0 sdist holds tests/testing_utils.py
alone. DIFFUSERS_TESTS names a folder holding tests/ read from the diffusers repository at one
commit (docs/testing-libraries.md names it) and kept outside this repository; the suite copies its
tests/ and nothing else. The sdist's tests/testing_utils.py is not put over it: it is newer than
the newest tree that could be read whole, whose mixins import helpers the release's file has
dropped (is_quanto), so the tree keeps its own. No src/ goes into the tree: tests/conftest.py puts
<tree>/src first on sys.path, and the installed release is what is under test.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import library_suite

from torch_openreg import testing

# Row name -> test file in the tree: a UNet, a transformer (DiT) model, and pipelines with tiny
# configs (DiT's, and the UNet2DModel pipelines DDIM and DDPM).
TEST_FILES = {
    "unet_2d_condition": "tests/models/unets/test_models_unet_2d_condition.py",
    "dit_transformer2d": "tests/models/transformers/test_models_dit_transformer2d.py",
    "dit_pipeline": "tests/pipelines/dit/test_dit.py",
    "ddim_pipeline": "tests/pipelines/ddim/test_ddim.py",
    "ddpm_pipeline": "tests/pipelines/ddpm/test_ddpm.py",
}


def assemble(tests: Path, tree: Path) -> None:
    """WORK/tree/tests from the test folder, and the spec files (Note [diffusers' test tree])."""
    for needed in ("tests/conftest.py", "tests/testing_utils.py", "tests/models/testing_utils", "tests/pipelines"):
        if not (tests / needed).exists():
            sys.exit(f"diffusers_suite: {tests} has no {needed}; see docs/testing-libraries.md")
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(tests / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    # The checkout's root is pytest's rootdir (its setup.py; diffusers has no pytest configuration). An
    # empty pytest.ini makes the tree's root so, not the first configuration file above it (openreg's
    # pyproject.toml when WORK is inside this repository).
    (tree / "pytest.ini").write_text("[pytest]\n")
    testing.write_specs(tree)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tests", type=Path, required=True, help="the test folder (Note [diffusers' test tree])")
    parser.add_argument("--files", default=",".join(TEST_FILES), help="comma-separated row names or tests/ paths")


def test_files(args: argparse.Namespace) -> dict[str, str]:
    """Each of --files: a row name of TEST_FILES, or a path under tests/ (its row is the file's name
    without test_ and .py)."""
    files = {}
    for name in filter(None, args.files.split(",")):
        if name in TEST_FILES:
            files[name] = TEST_FILES[name]
        elif name.startswith("tests/") and name.endswith(".py"):
            files[Path(name).stem.removeprefix("test_")] = name
        else:
            sys.exit(f"diffusers_suite: {name!r} is neither one of {', '.join(TEST_FILES)} nor a tests/....py path")
    return files


if __name__ == "__main__":
    sys.exit(
        library_suite.main(__doc__, "DIFFUSERS", arguments, lambda args, tree: assemble(args.tests, tree), test_files)
    )
