#!/usr/bin/env python3
"""transformers' own model tests, each file run on the CPU and on openreg, compared test by test.

    python tests/libraries/transformers_suite.py --sdist transformers-5.23.0.tar.gz \
        --tests TRANSFORMERS_TESTS --work build/libraries/transformers [--models gpt2,bert]

`make test-libraries` runs it in .venv-libraries/ (docs/testing-libraries.md). The test tree is put
together in WORK/tree from two sources (Note [transformers' test tree]), the spec files are written
there by torch_openreg.testing, and each model's test file runs twice, each in its own pytest
process in WORK/tree, with TRANSFORMERS_TEST_DEVICE=cpu, then with the openreg spec, and the two
are compared test by test (library_suite.py, shared with diffusers_suite.py, and compare.py): per
model, the tests that pass on the CPU, those that also pass on openreg, and the rest with their
first error line (WORK/results/<model>-<device>.xml and .log, WORK/report.md).

Note [transformers' test tree]
The wheel has no tests. The release's sdist holds tests/*_common.py, tests/*_mixin.py and the
library's source (src/transformers, which tests/test_pipeline_mixin.py imports by path); the model
test files, tests/generation/, tests/causal_lm_tester.py, the root conftest.py and
utils/test_module/ are not in it, and come from TRANSFORMERS_TESTS, a folder read from the
transformers repository at one commit (docs/testing-libraries.md names it) and kept outside this
repository. The sdist's files replace that folder's where both have one, since they are the
release's. tests/distributed_testing_utils.py, which the release's tensor-parallel, expert-parallel
and FSDP mixins import, is in neither: where the folder lacks it, a stand-in is written whose every
function skips the calling test (unittest.SkipTest), so those tests are skipped on both devices,
and counted as skipped, not as run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tarfile
from pathlib import Path

import library_suite

from torch_openreg import testing

DEFAULT_MODELS = ("gpt2", "bert", "llama", "t5", "vit", "whisper", "mixtral")

DISTRIBUTED_STAND_IN = '''"""Stand-in written by openreg's tests/libraries/transformers_suite.py (Note
[transformers' test tree]): the release's mixins import this module, which neither the sdist nor
the test folder holds.
Every function skips the test that calls it, on every device alike."""

import unittest


def _absent(*args, **kwargs):
    raise unittest.SkipTest("tests/distributed_testing_utils.py: in neither the transformers sdist nor the test folder")


run_distributed = _get_distributed_backend = _get_distributed_device_type = _absent
_get_rank_device = _set_rank_device = _start_rank_processes = _absent
'''


def assemble(sdist: Path, tests: Path, tree: Path) -> None:
    """WORK/tree from the test folder and the sdist (Note [transformers' test tree])."""
    for needed in ("conftest.py", "tests/models", "tests/generation", "utils/test_module"):
        if not (tests / needed).exists():
            sys.exit(f"transformers_suite: {tests} has no {needed}; see docs/testing-libraries.md")
    if tree.exists():
        shutil.rmtree(tree)
    shutil.copytree(tests, tree, ignore=shutil.ignore_patterns("__pycache__"))
    with tarfile.open(sdist) as archive:
        top = archive.getnames()[0].split("/")[0]  # transformers-X.Y.Z
        for member in archive.getmembers():
            relative = member.name[len(top) + 1 :]
            top_level_test = relative.startswith("tests/") and relative.count("/") == 1 and relative.endswith(".py")
            wanted = top_level_test or relative.startswith("src/transformers/") or relative == "pyproject.toml"
            if member.isfile() and wanted:
                target = tree / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(archive.extractfile(member).read())
    stand_in = tree / "tests" / "distributed_testing_utils.py"
    if not stand_in.exists():
        stand_in.write_text(DISTRIBUTED_STAND_IN)
    testing.write_specs(tree)


def arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sdist", type=Path, required=True, help="transformers' sdist, transformers-X.Y.Z.tar.gz")
    parser.add_argument("--tests", type=Path, required=True, help="the test folder (Note [transformers' test tree])")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS), help="comma-separated tests/models/ names")


def test_files(args: argparse.Namespace) -> dict[str, str]:
    return {m: f"tests/models/{m}/test_modeling_{m}.py" for m in args.models.split(",") if m}


if __name__ == "__main__":
    sys.exit(
        library_suite.main(
            __doc__, "TRANSFORMERS", arguments, lambda args, tree: assemble(args.sdist, args.tests, tree), test_files
        )
    )
