"""What every library's suite shares: each test file run on the CPU and on openreg, each in its own
pytest process in the assembled tree, then compared test by test (compare.py).

tests/libraries/transformers_suite.py and diffusers_suite.py put their library's test tree together
(each its own way) and hand this module the tree and the test files by name; docs/testing-libraries.md
has the commands. No variable is set that changes what the tests check: the library's defaults hold
on both devices. The CPU run names the CPU through the library's <PREFIX>_TEST_DEVICE; the openreg run
gets the variables of torch_openreg.testing (backend, device, spec file, which `testing.write_specs`
wrote into the tree). HF_HUB_OFFLINE=1 on both, since this machine reaches no model hub (a test that
needs one fails or skips alike on both devices instead of waiting for a connection).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import compare

from torch_openreg import testing


def device_environment(prefix: str, device: str) -> dict[str, str]:
    """The environment of one run: the caller's, without the library's test variables and pytest's, plus
    the CPU's device name or openreg's variables (prefix: TRANSFORMERS, DIFFUSERS)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith((f"{prefix}_TEST_", "PYTEST_"))}
    env["HF_HUB_OFFLINE"] = "1"
    if device == "cpu":
        env[f"{prefix}_TEST_DEVICE"] = "cpu"
    else:
        env.update({k: v for k, v in testing.environment().items() if k.startswith(f"{prefix}_")})
    return env


def run(tree: Path, results: Path, name: str, test_file: str, env: dict[str, str], device: str, timeout: int) -> None:
    """One pytest process in `tree`: RESULTS/<name>-<device>.xml (JUnit) and .log."""
    xml, log = results / f"{name}-{device}.xml", results / f"{name}-{device}.log"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rN", f"--junitxml={xml}", test_file]
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            code = subprocess.run(command, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    print(f"{name:18} {device:8} exit {code}, {time.monotonic() - start:.0f} s ({log})", flush=True)


def run_and_report(args: argparse.Namespace, prefix: str, tree: Path, test_files: dict[str, str]) -> int:
    """Runs every test file (name -> path in the tree) on every device, writes WORK/report.md and prints it.

    A run that left no JUnit file (a crash, a timeout) fails the command; a test that fails on openreg
    does not: the report lists it for classification (docs/testing-libraries.md)."""
    work = args.work.resolve()
    results = work / "results"
    results.mkdir(parents=True, exist_ok=True)
    devices = args.devices.split(",")
    for name, test_file in test_files.items():
        for device in devices:
            run(tree, results, name, test_file, device_environment(prefix, device), device, args.timeout)
    report = compare.report(results, list(test_files))
    (work / "report.md").write_text(report)
    print(report)
    missing = [f"{n}-{d}" for n in test_files for d in devices if not (results / f"{n}-{d}.xml").exists()]
    if missing:
        print(f"{Path(sys.argv[0]).stem}: no results from {', '.join(missing)}; see their .log in {results}")
    return 1 if missing else 0


def main(
    doc: str,
    prefix: str,
    arguments: Callable[[argparse.ArgumentParser], None],
    assemble: Callable[[argparse.Namespace, Path], None],
    test_files: Callable[[argparse.Namespace], dict[str, str]],
) -> int:
    """A suite's command line: its own options (`arguments`) and the shared ones; puts the tree together
    in WORK/tree unless --no-assemble, then runs `test_files(args)` (name -> path in the tree)."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    arguments(parser)
    parser.add_argument("--work", type=Path, required=True, help="where the tree, the results and the report go")
    parser.add_argument("--devices", default="cpu,openreg")
    parser.add_argument("--timeout", type=int, default=3600, help="seconds for one pytest process")
    parser.add_argument("--no-assemble", action="store_true", help="reuse WORK/tree as it is")
    args = parser.parse_args()
    tree = args.work.resolve() / "tree"  # the runs write from inside the tree
    if not args.no_assemble:
        assemble(args, tree)
    return run_and_report(args, prefix, tree, test_files(args))
