#!/usr/bin/env python3
"""The OpInfo conformance sweep: every operator PyTorch tests, on openreg, compared with the CPU.

For each OpInfo in `op_db`, each dtype the CPU supports for it, forward and (where autograd
applies) backward, every sample from `op.sample_inputs("cpu", ...)` runs on the CPU and, copied
with the same layout, on openreg; the results are compared bitwise, then within OpInfo's
tolerances. See docs/conformance.md.

    python tools/conformance.py [--ops name,name] [--dtypes float32,...] [--jobs N] [--out DIR]
                                [--reduced] [--timeout S] [--compile [--max-samples N]]

Writes DIR/coverage.json and DIR/coverage.md (DIR: conformance/, by tools/conformance_report.py).
With --compile, the compile sweep: forward only, float32, bfloat16 and int64, each op through
torch.compile on openreg against eager CPU, counted where CPU Inductor passes
(conformance_worker.classify_compiled); it writes DIR/compile-coverage.json and .md.
This file is the parent: the work runs in worker subprocesses (tools/conformance_worker.py) that
stream one JSON line per event; the parent restarts a worker that crashes or stops making
progress, and records the sample it was running as a crash.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import pathlib
import selectors
import signal
import subprocess
import sys
import tempfile
import time

import conformance_report
from conformance_worker import CATEGORIES, PASS, PATH_KEYS, short

ROOT = pathlib.Path(__file__).resolve().parent.parent
WORKER = pathlib.Path(__file__).resolve().parent / "conformance_worker.py"

# The subset `tests/test_conformance.py` runs: op name -> dtypes. float32 everywhere, and the
# dtypes where an operator's integer, boolean or double kernels differ.
F32, F64, I64, BOOL = "float32", "float64", "int64", "bool"
REDUCED = {
    # elementwise unary and binary
    "abs": (F32, I64), "exp": (F32, F64), "sigmoid": (F32,), "nn.functional.gelu": (F32,),
    "add": (F32, I64, BOOL), "mul": (F32, I64), "div.no_rounding_mode": (F32,), "pow": (F32, I64),
    "maximum": (F32, I64), "clamp": (F32, I64), "logical_and": (BOOL,), "eq": (F32, I64),
    # reductions
    "sum": (F32, I64, BOOL), "mean": (F32, F64), "amax": (F32, I64), "argmax": (F32, I64),
    "var": (F32,), "cumsum": (F32, I64), "any": (BOOL, F32), "logsumexp": (F32,),
    # matmul and linear algebra basics
    "mm": (F32, F64), "matmul": (F32,), "bmm": (F32,), "addmm": (F32,), "linalg.vector_norm": (F32,),
    # indexing, scatter, gather
    "index_select": (F32, I64), "gather": (F32,), "scatter_add": (F32,), "index_put": (F32,),
    "masked_fill": (F32, BOOL), "nonzero": (F32, BOOL), "masked_select": (F32,), "take_along_dim": (F32,),
    # views and reshapes
    "view": (F32,), "reshape": (F32, I64), "transpose": (F32,), "permute": (F32,), "expand": (F32,),
    "narrow": (F32,), "squeeze": (F32,), "flip": (F32,),
    # normalization, convolution, pooling, activations, losses
    "nn.functional.layer_norm": (F32, F64), "nn.functional.batch_norm": (F32,),
    "nn.functional.conv2d": (F32,), "nn.functional.adaptive_max_pool2d": (F32,),
    "nn.functional.avg_pool2d": (F32,), "nn.functional.linear": (F32,),
    "softmax": (F32, F64), "log_softmax": (F32,), "nn.functional.cross_entropy": (F32,),
    "nn.functional.mse_loss": (F32,), "nn.functional.embedding": (F32,),
    # sorting, joining, selection, random
    "sort": (F32, I64), "topk": (F32,), "unique": (F32,), "cat": (F32, I64, BOOL), "stack": (F32,),
    "where": (F32, I64), "bernoulli": (F32,), "normal": (F32,), "nn.functional.dropout": (F32,),
}

# The compile sweep's dtypes, and the subset of it that tests/test_compile_sweep.py runs.
COMPILE_DTYPES = ("float32", "bfloat16", "int64")
COMPILE_REDUCED = {"add": (F32, "bfloat16", I64), "softmax": (F32,), "mm": (F32,)}


# --------------------------------------------------------------------------------------------
# The parent: hands ops to workers, restarts a worker that dies or hangs, gathers the records.
# --------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Record:
    """One (op, dtype, direction): sample counts per category, ledger paths, first reasons."""
    samples: int = 0
    counts: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    paths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    reasons: dict = dataclasses.field(default_factory=dict)  # category -> first sample, reason, input
    note: str | None = None
    seconds: float = 0.0

    def add(self, category: str, index: int, reason: str | None, paths: dict, input: str | None) -> None:
        self.samples += 1
        self.counts[category] += 1
        self.paths.update(paths)
        if category not in PASS and category not in self.reasons:
            self.reasons[category] = {"sample": index, "reason": reason, "input": input}

    def as_json(self) -> dict:
        entry = {"samples": self.samples, **{c: self.counts[c] for c in CATEGORIES}}
        entry["paths"] = {k: self.paths[k] for k in PATH_KEYS}
        entry["reasons"] = self.reasons
        entry["seconds"] = round(self.seconds, 3)
        if self.note:
            entry["note"] = self.note
        return entry


class Worker:
    """A worker subprocess, its unread output, and the request it is serving."""

    def __init__(self, threads: int, extra_args: tuple = ()) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115  lives as long as the Worker: stop() reads it
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), "--threads", str(threads), *extra_args],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, cwd=ROOT,
            start_new_session=True,  # its own process group: a kill takes its children too
        )
        self.pending = b""
        self.last_event = time.monotonic()
        self.ready = False
        self.job: tuple[str, list, bool] | None = None  # op, its units not finished, retried
        self.unit: tuple | None = None  # (op, dtype, direction) being run
        self.stderr_mark = 0
        self.unit_started = 0.0
        self.next_sample = 0

    def send(self, op: str, units: list, retried: bool) -> None:
        self.job = (op, list(units), retried)
        self.stderr_mark = os.fstat(self.stderr.fileno()).st_size  # what it says from here is about this op
        self.unit = None
        self.last_event = time.monotonic()
        self.process.stdin.write((json.dumps({"op": op, "units": units}) + "\n").encode())
        self.process.stdin.flush()

    def events(self) -> list[dict] | None:
        """Complete events now readable; None once the worker's output has ended."""
        data = os.read(self.process.stdout.fileno(), 1 << 16)
        if not data:
            return None
        self.last_event = time.monotonic()
        self.pending += data
        *lines, self.pending = self.pending.split(b"\n")
        return [json.loads(line) for line in lines if line.strip()]

    def stop(self) -> str:
        """Ends the worker (its process group) and says how it ended, with its last stderr line."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        code = self.process.wait()
        self.stderr.seek(max(self.stderr_mark, os.fstat(self.stderr.fileno()).st_size - 4096))
        tail = [line for line in self.stderr.read().decode(errors="replace").splitlines() if line.strip()]
        how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        return short(how + (f"; last stderr line: {tail[-1]}" if tail else ""))


# [marker: scheduler]
def sweep(plan: dict[str, list], jobs: int = 1, timeout: float = 60.0, log=None,
          worker_args: tuple = ()) -> dict[tuple, Record]:
    """Runs `plan` (op name -> [(dtype, direction), ...]) on `jobs` workers, each op on one worker.
    A worker that dies or sends nothing for `timeout` seconds is replaced: the sample it was
    running counts as a crash, once a retry in a fresh worker has crashed too (a dying process
    can be a fluke, say a shared library rebuilt underneath), and the op goes on from the next
    unit. Returns the records by (op, dtype, direction)."""
    queue = collections.deque((op, units, False) for op, units in plan.items())
    records: dict[tuple, Record] = {}
    threads = 1 if jobs > 1 else max(1, os.cpu_count() or 1)
    selector = selectors.DefaultSelector()
    workers: list[Worker] = []
    done, startup_failures = 0, 0

    def start_worker() -> None:
        worker = Worker(threads, worker_args)
        selector.register(worker.process.stdout, selectors.EVENT_READ, worker)
        workers.append(worker)

    def lose(worker: Worker, why: str) -> None:
        nonlocal startup_failures
        selector.unregister(worker.process.stdout)
        workers.remove(worker)
        how = worker.stop()
        if not worker.ready:
            startup_failures += 1
            if startup_failures >= 3:
                raise RuntimeError(f"conformance: workers fail to start ({how})")
        elif worker.job:
            op, units, retried = worker.job
            unit = worker.unit or (op, *units[0])
            remaining = units[units.index(list(unit[1:])) + 1:]
            if retried or why.startswith("timeout"):
                record = records.setdefault(unit, Record())
                reason = short(f"{why} ({how}) in sample {worker.next_sample}")
                record.add("crash", worker.next_sample, reason, {}, None)
                if remaining:
                    queue.appendleft((op, remaining, False))
            else:
                queue.appendleft((op, [list(unit[1:]), *remaining], True))
        if queue or any(w.job for w in workers):
            start_worker()

    for _ in range(min(jobs, len(queue))):
        start_worker()
    while queue or any(w.job for w in workers):
        for key, _ in selector.select(timeout=1.0):
            worker = key.data
            events = worker.events()
            if events is None:
                lose(worker, "worker died")
                continue
            for event in events:
                kind = event["event"]
                if kind == "ready":
                    worker.ready = True
                    startup_failures = 0
                elif kind == "unit":
                    op, units, retried = worker.job
                    worker.unit = (op, event["dtype"], event["direction"])
                    if retried and [event["dtype"], event["direction"]] != units[0]:
                        worker.job = (op, units, False)  # the retried unit passed: others get their own retry
                    worker.unit_started, worker.next_sample = time.monotonic(), 0
                    records[worker.unit] = Record()  # a retried unit starts afresh
                elif kind == "sample":
                    records[worker.unit].add(event["category"], event["index"], event["reason"],
                                             event["paths"], event["input"])
                    records[worker.unit].seconds = time.monotonic() - worker.unit_started
                    worker.next_sample = event["index"] + 1
                elif kind == "note":
                    records[worker.unit].note = event["reason"]
                elif kind == "idle":
                    done += 1
                    if log:
                        log(f"[{done}/{len(plan)}] {worker.job[0]}")
                    worker.job, worker.unit = None, None
        now = time.monotonic()
        for worker in workers.copy():  # lose() removes a worker from the list
            limit = max(timeout, 120.0) if not worker.ready else timeout
            if now - worker.last_event > limit:
                lose(worker, f"timeout: no progress for {limit:.0f} s")
        for worker in workers.copy():  # lose() removes a worker from the list
            if worker.ready and worker.job is None and queue:
                worker.send(*queue.popleft())
    for worker in workers:
        selector.unregister(worker.process.stdout)
        worker.process.stdin.close()
        worker.stop()
    return records


# --------------------------------------------------------------------------------------------
# The command line.
# --------------------------------------------------------------------------------------------

def make_plan(op_names=None, dtype_names=None, reduced: bool = False, compile: bool = False) -> dict[str, list]:
    """op name -> [[dtype, direction], ...]: every dtype the CPU supports for the op (or the
    reduced subset's), forward, and backward for the dtypes OpInfo's autograd tests cover. The
    compile sweep's plan: forward only, COMPILE_DTYPES (its reduced subset: COMPILE_REDUCED)."""
    from torch.testing._internal.common_methods_invocations import op_db

    ops = {op.full_name: op for op in op_db}
    subset = COMPILE_REDUCED if compile else REDUCED
    names = list(subset) if reduced else list(ops)
    if op_names:
        unknown = sorted(set(op_names) - set(ops))
        if unknown:
            raise SystemExit(f"conformance: no OpInfo named {', '.join(unknown)}")
        names = [n for n in names if n in op_names] if reduced else list(op_names)
    plan = {}
    for name in names:
        op = ops[name]
        forward = sorted(str(d).removeprefix("torch.") for d in op.supported_dtypes("cpu"))
        backward = {str(d).removeprefix("torch.") for d in op.supported_backward_dtypes("cpu")}
        if reduced and name in subset:
            forward = [d for d in forward if d in subset[name]]
        if compile:
            forward, backward = [d for d in forward if d in COMPILE_DTYPES], set()
        if dtype_names:
            forward = [d for d in forward if d in dtype_names]
        units = [[d, direction] for d in forward for direction in ("forward", "backward")
                 if direction == "forward" or (op.supports_autograd and d in backward)]
        if units:
            plan[name] = units
    return plan


def source_revision() -> str:
    """The commit the sweep ran against, '+modified' when the engine's sources differ from it."""
    def git(*args: str) -> str:
        result = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return result.stdout.strip() if result.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+modified" if git("status", "--porcelain", "csrc", "runtime", "torch_openreg") else "")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ops", help="comma-separated OpInfo names (op.full_name); default: all")
    parser.add_argument("--dtypes", help="comma-separated dtypes, e.g. float32,int64; default: all")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--out", default=str(ROOT / "conformance"), help="output folder")
    parser.add_argument("--reduced", action="store_true", help="the subset tests/test_conformance.py runs")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="seconds without progress before a worker is replaced (default 60)")
    parser.add_argument("--compile", action="store_true", help="the compile sweep (torch.compile on openreg)")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per (op, dtype) at most (0: all)")
    args = parser.parse_args(argv)

    import torch

    split = lambda text: [part.strip() for part in text.split(",") if part.strip()] if text else None  # noqa: E731
    plan = make_plan(split(args.ops), split(args.dtypes), args.reduced, args.compile)
    if not plan:
        raise SystemExit("conformance: nothing to run")
    started = time.monotonic()

    def log(message: str) -> None:
        print(f"{time.monotonic() - started:7.1f}s {message}", file=sys.stderr, flush=True)

    worker_args = ("--compile", "--max-samples", str(args.max_samples)) if args.compile else ()
    records = sweep(plan, jobs=args.jobs, timeout=args.timeout, log=log, worker_args=worker_args)
    meta = {
        "command": "python tools/conformance.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d"),
        "torch": torch.__version__,
        "openreg": source_revision(),
        "ops": len(plan),
        "entries": sum(len(units) for units in plan.values()),
        "seconds": round(time.monotonic() - started, 1),
        "jobs": args.jobs,
    }
    stem = "coverage"
    if args.compile:
        stem = "compile-coverage"
        meta["title"] = "OpInfo compile sweep: torch.compile on openreg against eager CPU"
        meta["max_samples"] = args.max_samples
    result = conformance_report.coverage(records, meta)
    conformance_report.write(result, pathlib.Path(args.out), stem)
    for direction in conformance_report.DIRECTIONS:
        s = result["summary"][direction]
        print(f"{direction}: {s['samples']} samples, pass rate {conformance_report.percent(s['pass_rate'])}, "
              + ", ".join(f"{c} {s[c]}" for c in CATEGORIES))
    print(f"wrote {args.out}/{stem}.json and {stem}.md in {meta['seconds']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
