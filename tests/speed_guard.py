"""Host instructions per call, openreg against the CPU, counted under callgrind: the speed guard.

Timed tests are noisy; instruction counts are not. This script runs every case of CASES on the
CPU and on openreg in one process under valgrind's callgrind, counting the instructions of every
thread (the calling one, the stream's worker) while a case runs, and prints, per case, the counts
per call and their ratio openreg / CPU. tests/test_speed_guard.py holds each ratio against the
committed budget (tests/speed_budget.json, one per torch release) and fails when a change grows one by more than 10%.

What makes two runs give the same figure (docs/performance.md, "The guard"):
  - one intra-op thread (torch.set_num_threads(1)): OpenMP's helpers spin while they wait;
  - OPENREG_WORKER_SPIN_US=0: a waiting host or worker goes to sleep at once instead of spinning
    for a time, whose count of loops depends on the clock;
  - OPENREG_OPENMP_RELEASE_US=-1: no thread gives its OpenMP threads back after a timed sleep;
  - OPENREG_DEVICE_MEMORY=256M: each device reserves 16 times its capacity of address space, more
    than valgrind gives a process at the default quarter of physical memory;
  - each case warms up first (shape cache, allocator, optimizer state), then runs CALLS[kind]
    calls and one synchronize, counted together.

    speed_guard.py                    runs callgrind on this script and prints the table (JSON with
                                      --json PATH)
    speed_guard.py --update           also rewrites tests/speed_budget.json with this run's ratios
    speed_guard.py --profile CASE     where one case's instructions go on openreg: inclusive counts
                                      per call of the engine's stages (callgrind_annotate)
    speed_guard.py --child OUT_DIR    (what valgrind runs) the cases themselves
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import subprocess
import sys
import tempfile
from collections.abc import Callable
from typing import Any

BUDGET = pathlib.Path(__file__).resolve().parent / "speed_budget.json"
TOLERANCE = 1.10  # a ratio may grow by 10% before the guard fails
CALLS = {"tiny": 50, "step": 3}
GUARD_ENV = {"OPENREG_DEVICE_MEMORY": "256M", "OPENREG_WORKER_SPIN_US": "0", "OPENREG_OPENMP_RELEASE_US": "-1",
             "OMP_NUM_THREADS": "1",
             "OMP_WAIT_POLICY": "passive"}


def _cases() -> dict[str, tuple[str, Callable[[str], Callable[[], Any]]]]:
    """name -> (kind, build(device) -> call)."""
    import torch
    from torch import nn

    def tensors(device: str, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
        g = torch.Generator().manual_seed(0)
        return [torch.randn(*shape, generator=g).to(device) for shape in shapes]

    def op(call: Callable[..., Any], *shapes: tuple[int, ...]) -> Callable[[str], Callable[[], Any]]:
        def build(device: str) -> Callable[[], Any]:
            args = tensors(device, *shapes)
            return lambda: call(*args)
        return build

    def new_shapes(call: Callable[[torch.Tensor], Any]) -> Callable[[str], Callable[[], Any]]:
        """Each call on rows 0..n of one tensor, n one more than the last call's: a signature the
        engine has not seen, so every call asks the Meta kernel (Note [C++ Meta kernels])."""
        def build(device: str) -> Callable[[], Any]:
            (base,) = tensors(device, (256, 16))
            lengths = itertools.count(1)
            return lambda: call(base[: next(lengths)])
        return build

    def optimizer(make: Callable[..., torch.optim.Optimizer], **options: Any) -> Callable[[str], Callable[[], Any]]:
        def build(device: str) -> Callable[[], Any]:
            params = [p.requires_grad_() for p in tensors(device, *[(64, 64)] * 8)]
            for p, g in zip(params, tensors(device, *[(64, 64)] * 8), strict=True):
                p.grad = g * 1e-3
            opt = make(params, lr=1e-3, **options)
            return opt.step
        return build

    def training(device: str) -> Callable[[], Any]:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
        x, y = torch.randn(16, 32).to(device), torch.randint(0, 10, (16,)).to(device)

        def step() -> None:
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return step

    optim = torch.optim
    return {
        "add, 1 element": ("tiny", op(lambda a, b: a + b, (1,), (1,))),
        "relu, 8x8": ("tiny", op(torch.relu, (8, 8))),
        "sum, 8x8": ("tiny", op(torch.sum, (8, 8))),
        "mul_ in place, 8x8": ("tiny", op(lambda a: a.mul_(1.0), (8, 8))),
        "mm, 8x8": ("tiny", op(torch.mm, (8, 8), (8, 8))),
        "copy_, 8x8": ("tiny", op(lambda dst, src: dst.copy_(src), (8, 8), (8, 8))),
        "view(-1), 8x8": ("tiny", op(lambda a: a.view(-1), (8, 8))),
        "add, a new shape each call": ("tiny", new_shapes(lambda a: a + a)),
        "relu, a new shape each call": ("tiny", new_shapes(torch.relu)),
        "SGD momentum step, foreach": ("step", optimizer(optim.SGD, momentum=0.9, foreach=True)),
        "SGD momentum step, fused": ("step", optimizer(optim.SGD, momentum=0.9, fused=True)),
        "Adam step, foreach": ("step", optimizer(optim.Adam, foreach=True)),
        "Adam step, fused": ("step", optimizer(optim.Adam, fused=True)),
        "AdamW step, foreach": ("step", optimizer(optim.AdamW, foreach=True)),
        "AdamW step, fused": ("step", optimizer(optim.AdamW, fused=True)),
        "MLP training step (32-64-10, batch 16, SGD)": ("step", training),
    }


# The stages of a call, as callgrind names their functions: (label, a piece of the function's name).
STAGES = [
    ("Python binding, whole call", "THPVariable_"),
    ("  the engine's unboxed entry (BorrowingEntry), inclusive", "BorrowingEntry<"),
    ("  the engine's boxed entry (runOnEngine), inclusive", "openreg::engine::runOnEngine("),
    ("    the call (runCall), inclusive", "openreg::engine::runCall("),
    ("    call signature (Signature::build)", "openreg::engine::Signature::build("),
    ("    shape cache lookup", "openreg::engine::ShapeCache::find("),
    ("    call checks (a miss only)", "openreg::engine::runCallChecks("),
    ("    asynchronous path (runAsync), inclusive", "openreg::engine::runAsync("),
    ("      output allocation", "openreg::emptyStridedOnDevice("),
    ("      task arguments (describeKernelAlias)", "openreg::describeKernelAlias("),
    ("      launch (orLaunchTask)", "orLaunchTask"),
    ("    results on the stack (pushResults)", "openreg::engine::pushResults("),
    ("  a Python tensor's second C++ reference takes the GIL", "c10::TensorImpl::incref_pyobject("),
    ("  and its release", "c10::TensorImpl::decref_pyobject("),
    ("freeing a result (caching allocator)", "DeviceCachingAllocator::free("),
    ("the task on the worker (AsyncTask), inclusive", "openreg::engine::AsyncTask::operator()"),
]


def child(out_dir: str, only: str | None = None) -> None:
    """Runs under callgrind: each case on each device, its calls counted into a dump of its own."""
    import torch

    import torch_openreg  # noqa: F401

    torch.set_num_threads(1)
    torch.openreg.init()
    # Instrumentation from here on: under it, importing torch alone takes minutes.
    subprocess.run(["callgrind_control", "--instr=on", str(os.getpid())], check=True, capture_output=True)
    dumps = 0

    def dump() -> int:
        """Ends a dump of every thread's counts since the last one; returns its number. Collection
        is per thread in callgrind: toggled off by the dump, it is toggled on again at once for
        this thread, while the device's workers collect all along."""
        nonlocal dumps
        torch._C._valgrind_toggle_and_dump_stats()
        torch._C._valgrind_toggle()
        dumps += 1
        return dumps

    order = []
    for name, (kind, build) in _cases().items():
        if only is not None and name != only:
            continue
        for device in ("cpu", "openreg") if only is None else ("openreg",):
            fn = build(device)
            for _ in range(3):  # warm-up: caches, allocator, optimizer state
                fn()
            if device == "openreg":
                torch.openreg.synchronize()
            dump()  # the warm-up's counts, not used
            for _ in range(CALLS[kind]):
                fn()
            if device == "openreg":
                torch.openreg.synchronize()
            order.append({"case": name, "kind": kind, "device": device, "dump": dump()})
    pathlib.Path(out_dir, "order.json").write_text(json.dumps(order))


def _instructions(dump: pathlib.Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in {dump}")


def _callgrind(out_dir: str, *child_args: str) -> None:
    env = {**os.environ, **GUARD_ENV}
    # Collection on from the start in every thread (the device's workers too), instrumentation off
    # until the child has imported torch (callgrind_control switches it on).
    command = ["valgrind", "--tool=callgrind", "--collect-atstart=yes", "--instr-atstart=no",
               "--dump-instr=no", "--dump-line=no", "--separate-threads=no",
               f"--callgrind-out-file={out_dir}/callgrind.out", sys.executable, __file__, "--child", out_dir,
               *child_args]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"callgrind run failed ({done.returncode}):\n{done.stderr[-4000:]}")


def profile(case: str) -> str:
    """Inclusive instructions per call of each stage of STAGES, for one case on openreg."""
    kind = _cases()[case][0]
    with tempfile.TemporaryDirectory() as tmp:
        _callgrind(tmp, "--only", case)
        (entry,) = json.loads(pathlib.Path(tmp, "order.json").read_text())
        dump = pathlib.Path(tmp, f"callgrind.out.{entry['dump']}")
        report = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                                capture_output=True, text=True, check=True).stdout
        total = _instructions(dump)
    lines = [f"{case} on openreg: {total / CALLS[kind]:.0f} instructions per call, all threads", ""]
    for label, piece in STAGES:
        counts = [int(line.split()[0].replace(",", "")) for line in report.splitlines()
                  if piece in line and line.strip()[:1].isdigit()]
        if counts:
            lines.append(f"{label:<62}{max(counts) / CALLS[kind]:>10.0f}")
    return "\n".join(lines)


def measure() -> list[dict[str, Any]]:
    """Runs the cases under callgrind; per case, instructions per call on each device and the ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        _callgrind(tmp)
        order = json.loads(pathlib.Path(tmp, "order.json").read_text())
        counts = {(e["case"], e["device"]): (e["kind"], _instructions(pathlib.Path(tmp, f"callgrind.out.{e['dump']}")))
                  for e in order}
    rows = []
    for (name, device), (kind, total) in counts.items():
        if device != "cpu":
            continue
        cpu = total / CALLS[kind]
        dev = counts[(name, "openreg")][1] / CALLS[kind]
        rows.append({"case": name, "cpu": round(cpu), "openreg": round(dev), "ratio": round(dev / cpu, 3)})
    return rows


def release() -> str:
    """The running torch's major.minor: instruction counts differ between releases, so each has a
    budget of its own."""
    from torch_openreg import _compat

    return ".".join(map(str, _compat.RUNNING))


def load_budget() -> dict[str, float]:
    """The budget of the running torch release (empty when it has none)."""
    budgets = json.loads(BUDGET.read_text()) if BUDGET.exists() else {}
    return budgets.get(release(), {})


def compare(rows: list[dict[str, Any]], budget: dict[str, float]) -> list[str]:
    """The cases whose ratio grew past the budget by more than TOLERANCE, described."""
    failures = []
    for r in rows:
        allowed = budget.get(r["case"])
        if allowed is None:
            failures.append(f"{r['case']}: no budget (run tests/speed_guard.py --update)")
        elif r["ratio"] > allowed * TOLERANCE:
            failures.append(f"{r['case']}: openreg/CPU {r['ratio']:.3f} > budget {allowed:.3f} x {TOLERANCE} "
                            f"({r['openreg']} against {r['cpu']} instructions per call)")
    return failures


def table(rows: list[dict[str, Any]], budget: dict[str, float]) -> str:
    lines = [f"{'case':<46}{'CPU instr':>12}{'openreg instr':>15}{'ratio':>8}{'budget':>8}"]
    for r in rows:
        allowed = budget.get(r["case"])
        lines.append(f"{r['case']:<46}{r['cpu']:>12}{r['openreg']:>15}{r['ratio']:>8.3f}"
                     f"{'-' if allowed is None else format(allowed, '.3f'):>8}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", metavar="OUT_DIR", help=argparse.SUPPRESS)
    parser.add_argument("--update", action="store_true", help="rewrite the budget with this run's ratios")
    parser.add_argument("--json", metavar="PATH", help="also write the rows as JSON")
    parser.add_argument("--profile", metavar="CASE", help="where one case's instructions go on openreg")
    parser.add_argument("--only", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.only)
        return
    if args.profile:
        print(profile(args.profile))
        return
    rows = measure()
    budget = load_budget()
    print(table(rows, budget))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")
    if args.update:
        budgets = json.loads(BUDGET.read_text()) if BUDGET.exists() else {}
        budgets[release()] = {r["case"]: r["ratio"] for r in rows}
        BUDGET.write_text(json.dumps(budgets, indent=1, sort_keys=True) + "\n")
        print(f"wrote {BUDGET} (torch {release()})")
    failures = compare(rows, budget)
    if failures and not args.update:
        print("\n".join(failures))
        sys.exit(1)


if __name__ == "__main__":
    main()
