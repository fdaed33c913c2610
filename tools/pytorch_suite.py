#!/usr/bin/env python3
"""PyTorch's own device-generic test files, on the CPU and on openreg, compared test by test.

    python tools/pytorch_suite.py --tests DIR [--files test_view_ops.py,...] [--out DIR]
                                  [--name NAME] [--jobs N] [--timeout S] [--rerun-max N]
                                  [--expected FILE] [--update]

DIR is a folder of test files read from pytorch/pytorch (kept outside the repository). Each file
runs twice, each time in a fresh process: with only the CPU instantiated
(`PYTORCH_TESTING_DEVICE_ONLY_FOR=cpu`) and with only openreg (`privateuse1`). The plugin
(tools/pytorch_suite_plugin.py) streams each test's start and outcome; a process that dies or
hangs in a test is restarted after it, and that test is recorded as a crash or a timeout. A test
that passed on the CPU and failed on openreg runs again alone, in a fresh process, so a failure
that only an earlier test caused is told apart ("spoiled"). Writes OUT/NAME.json (every test) and
OUT/NAME.md (the per-file table and the failures grouped by cause), NAME being pytorch-suite unless
given (`make conformance-pytorch TORCH=X.Y.Z` names another release's report pytorch-suite-X.Y); see
docs/conformance.md, "PyTorch's device-generic tests".
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

TOOLS = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(TOOLS))  # also under PYTHONSAFEPATH=1, as make test-torch runs
import pytorch_suite_report  # noqa: E402

ROOT = TOOLS.parent

# The files docs/conformance.md reports on; `--files` picks others.
DEFAULT_FILES = (
    "test_view_ops.py", "test_indexing.py", "test_shape_ops.py", "test_sort_and_select.py",
    "test_type_promotion.py", "test_reductions.py", "test_tensor_creation_ops.py",
    "test_torch.py", "test_nn.py",
)
# Classes of test_torch.py and test_nn.py that are not device-generic run on the CPU alone in
# both runs; only the instantiated classes are compared (the key drops the device suffix).
ONLY_FOR = {"cpu": "cpu", "openreg": "privateuse1"}


def test_key(nodeid: str) -> tuple[str, str] | None:
    """`f.py::TestFooCPU::test_bar_cpu_float32` and `f.py::TestFooPRIVATEUSE1::test_bar_openreg_float32`
    -> ("f.py::TestFoo", "test_bar_float32"); None for a test that is not device-generic."""
    parts = nodeid.split("::")
    if len(parts) != 3:
        return None
    file, cls, name = parts
    # PrivateUse1TestBase names its classes PRIVATEUSE1 until its setUpClass has run once, and
    # after the device's own name (OPENREG) in files that instantiate classes after that.
    for suffix, token in (("CPU", "cpu"), ("PRIVATEUSE1", "openreg"), ("OPENREG", "openreg")):
        if cls.endswith(suffix):
            generic = re.sub(rf"_{token}(?=_|$)", "", name, count=1)
            return f"{file}::{cls[: -len(suffix)]}", generic
    return None


def openreg_test_base() -> pathlib.Path:
    """The installed package's test base file, found without importing torch_openreg here."""
    spec = importlib.util.find_spec("torch_openreg")
    if spec is None or spec.origin is None:
        raise SystemExit("pytorch_suite: torch_openreg is not installed in this Python")
    return pathlib.Path(spec.origin).parent / "pytorch_test_base.py"


def run_file(path: pathlib.Path, device: str, timeout: float, work: pathlib.Path,
             only: list[str] | None = None) -> tuple[dict[str, dict], float]:
    """Runs one file (or the tests `only` names) on one device; returns {nodeid: record} and the
    wall time. A process that ends with tests started but not finished is restarted without them."""
    events = work / f"{path.stem}.{device}.{os.getpid()}.{time.monotonic_ns()}.jsonl"
    skip_file = events.with_suffix(".skip")
    records: dict[str, dict] = {}
    skipped: set[str] = set()
    env = dict(os.environ, PYTORCH_TESTING_DEVICE_ONLY_FOR=ONLY_FOR[device],
               OPENREG_SUITE_DEVICE=device, OPENREG_SUITE_EVENTS=str(events),
               OPENREG_SUITE_SKIP=str(skip_file),
               PYTHONPATH=os.pathsep.join(filter(None, [str(TOOLS), os.environ.get("PYTHONPATH")])))
    if device == "openreg":
        # openreg's device test base (torch_openreg/pytorch_test_base.py), through PyTorch's
        # TORCH_TEST_DEVICES: the generic PrivateUse1TestBase plus the capabilities torch 2.15's
        # @requires_capabilities asks for.
        env["TORCH_TEST_DEVICES"] = str(openreg_test_base())
    if device == "openreg" and "OPENREG_DEVICE_MEMORY" not in os.environ:
        # @largeTensorTest asks the CPU run for free host memory and the openreg run for the
        # device's (mem_get_info), whose capacity defaults to a quarter of host memory: with half,
        # the tests of 8 GB that run on the CPU here run on openreg too.
        env["OPENREG_DEVICE_MEMORY"] = str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2)
    targets = only if only else [path.name]
    start = time.monotonic()
    while True:
        skip_file.write_text("\n".join(sorted(skipped)))
        cmd = [sys.executable, "-m", "pytest", *targets, "-p", "pytorch_suite_plugin",
               "-p", "no:cacheprovider", "-q", "-o", "addopts=", "--rootdir", str(path.parent),
               f"--timeout={timeout}", "--timeout-method=thread"]
        began = time.monotonic()
        subprocess.run(cmd, cwd=path.parent, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=timeout * 50 + 600)
        running: dict[str, float] = {}
        for line in events.read_text(encoding="utf-8").splitlines():
            event = json.loads(line)
            if event["event"] == "start":
                running[event["test"]] = event["time"]
            else:
                running.pop(event["test"], None)
                records[event["test"]] = event
        unfinished = [t for t in running if t not in records]
        if not unfinished:
            break
        for test in unfinished:
            seconds = time.time() - running[test]
            outcome = "timeout" if seconds >= timeout else "crash"
            records[test] = {"test": test, "outcome": outcome, "seconds": round(seconds, 2),
                             "message": f"the process ended in this test after {seconds:.0f} s"}
        skipped |= set(records)
        if time.monotonic() - began < 1 and not records:
            break  # nothing ran at all: an import error, reported below
    events.unlink(missing_ok=True)
    skip_file.unlink(missing_ok=True)
    if not records:
        records[path.name] = {"test": path.name, "outcome": "import-error",
                              "message": _import_error(path, env), "seconds": 0}
    return records, time.monotonic() - start


def _import_error(path: pathlib.Path, env: dict) -> str:
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", path.name,
                          "-o", "addopts=", "-p", "no:cacheprovider"], cwd=path.parent, env=env,
                         capture_output=True, text=True, timeout=600)
    errors = [line for line in out.stdout.splitlines() if line.startswith("E ")]
    return (errors[-1] if errors else out.stdout.strip().splitlines()[-1:] or ["?"])[0][:300]


def rerun_alone(path: pathlib.Path, tests: list[str], timeout: float, work: pathlib.Path,
                jobs: int) -> dict[str, dict]:
    """Each test again in a fresh process of its own."""
    def one(test: str) -> tuple[str, dict]:
        records, _ = run_file(path, "openreg", timeout, work, only=[test])
        return test, records.get(test, {"outcome": "missing"})

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        return dict(pool.map(one, tests))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tests", required=True, type=pathlib.Path)
    parser.add_argument("--files", default=",".join(DEFAULT_FILES))
    parser.add_argument("--out", type=pathlib.Path, default=ROOT / "conformance")
    parser.add_argument("--name", default="pytorch-suite",
                        help="the report's file name without .json/.md (one per torch release)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="processes at once; wall-time ratios are fairest with 1")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per test")
    parser.add_argument("--expected", type=pathlib.Path, default=TOOLS / "pytorch_suite_expected.py",
                        help="the expected failures (default: tools/pytorch_suite_expected.py)")
    parser.add_argument("--rerun-max", type=int, default=60,
                        help="most failures per file to re-run alone")
    parser.add_argument("--update", action="store_true",
                        help="keep the other files of an existing report of the same torch, replacing "
                             "those run (a file re-run after a fix); each file's commit is recorded")
    args = parser.parse_args()
    os.environ["OPENREG_SUITE_EXPECTED"] = str(args.expected.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    files = [args.tests / f for f in args.files.split(",") if f]
    missing = [str(f) for f in files if not f.exists()]
    if missing:
        sys.exit(f"pytorch_suite: no such test file: {', '.join(missing)} (see docs/conformance.md "
                 "for where the files come from)")

    results = {}
    data = {"torch": _torch_version(), "tests_dir": str(args.tests), "files": results}
    previous = args.out / f"{args.name}.json"
    if args.update and previous.exists():
        old = json.loads(previous.read_text())
        if old["torch"] != data["torch"]:
            sys.exit(f"pytorch_suite: --update: {previous} is of torch {old['torch']}, not {data['torch']}")
        results.update(old["files"])
    commit = _commit()
    with tempfile.TemporaryDirectory(prefix="pytorch-suite-") as tmp:
        work = pathlib.Path(tmp)
        for f in files:  # one file at a time, its CPU and openreg runs side by side
            with concurrent.futures.ThreadPoolExecutor(min(args.jobs, 2)) as pool:
                cpu_run, dev_run = pool.map(lambda d, f=f: run_file(f, d, args.timeout, work),
                                            ("cpu", "openreg"))
            (cpu, cpu_wall), (dev, dev_wall) = cpu_run, dev_run
            # (Not the classes that are not device-generic, which run on the CPU in both processes.)
            cpu_passed = {test_key(t) for t, r in cpu.items() if r["outcome"] == "passed"} - {None}
            to_rerun = [t for t, r in dev.items() if test_key(t) in cpu_passed
                        and r["outcome"] in ("failed", "crash", "timeout", "teardown-error")]
            alone = rerun_alone(f, to_rerun[: args.rerun_max], args.timeout, work, args.jobs)
            results[f.name] = {"cpu": cpu, "openreg": dev, "alone": alone,
                               "wall": {"cpu": cpu_wall, "openreg": dev_wall},
                               "rerun_skipped": max(0, len(to_rerun) - args.rerun_max),
                               "commit": commit}
            print(f"{f.name}: cpu {len(cpu)} tests {cpu_wall:.0f} s, openreg {len(dev)} tests "
                  f"{dev_wall:.0f} s, {len(alone)} re-run alone", flush=True)
            # Written after each file, so a long run can be read while it goes on.
            (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
            (args.out / f"{args.name}.md").write_text(pytorch_suite_report.render(data, test_key))
    print(f"wrote {args.out / args.name}.md")
    return 0


def _commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return out.stdout.strip() or "?"


def _torch_version() -> str:
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__)"],
                         capture_output=True, text=True)
    return out.stdout.strip()


if __name__ == "__main__":
    sys.exit(main())
