"""The execution engine against the CPU, in one process: tiny operator calls (host cost dominates),
large ones (kernel time dominates), and full training steps of real models (bench/models.py).

How a figure is made. Each case is built twice from the same seed, for the CPU and for openreg.
One call on each device is compared bitwise (for a training step, the losses of its first three
steps) and one openreg call is counted by path (native/async/sync/copying). The number of calls
per repeat is then calibrated per device, so that a repeat lasts about the case kind's budget;
these runs are the warm-up. Then 7 repeats alternate between the CPU and openreg (so a noisy
neighbour on a shared machine hits both alike), and each figure is the median. Every openreg
repeat ends with torch.openreg.synchronize(), so it measures completed work, not launches.

Large-op sizes keep every output under glibc's 32 MiB mmap ceiling: above it, each CPU call would
get fresh pages from the kernel and pay their first touch, which openreg's caching allocator
avoids, and the ratio would flatter openreg.

A case that fails on either device is skipped with its reason printed, and stays in the JSON.

    engine_bench.py [PATH]                   one run, JSON also written to PATH (or --json PATH)
    engine_bench.py --threads 1              torch.set_num_threads(1) before anything runs
    engine_bench.py --thread-sweep           one child process per thread count (1..cores),
                    [--worker-sweep 1,2]     times OPENREG_STREAM_WORKERS values; both tables
    engine_bench.py --profile "add, 1"       where host time goes for one case on openreg
                    [--perf]                 (torch.profiler, cProfile; perf for native code)
    engine_bench.py --list | --only tiny|"host read"|"new shapes"|large|optimizer|training|SUBSTRING
"""

from __future__ import annotations

import argparse
import cProfile
import inspect
import itertools
import json
import math
import os
import pathlib
import pstats
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from models import TRAINING_CASES

REPEATS = 7
# Targets: openreg time / CPU time, at most, per kind of case (a case may set its own: copies and
# views). Training's is the geometric mean's; each training step must also stay at or under 1.0.
TARGETS = {"tiny": 1.25, "host read": 1.5, "new shapes": 1.5, "large": 1.05, "optimizer": 1.1,
           "training": 0.9}
# Seconds one repeat should last on each device, per kind of case.
BUDGETS = {"tiny": 0.02, "host read": 0.02, "new shapes": 0.02, "large": 0.15, "optimizer": 0.1,
           "training": 0.25}
# Calls per repeat at least, so that the final synchronize is a small part of a repeat.
MIN_CALLS = {"tiny": 1000, "host read": 1000, "new shapes": 1000, "large": 1, "optimizer": 10, "training": 1}
# Runtime configuration read from the environment (docs/runtime.md), with the defaults.
RUNTIME_ENV = {"OPENREG_STREAM_WORKERS": "1", "OPENREG_WORKER_SPIN_US": "50", "OPENREG_LAUNCH_BLOCKING": "0",
               "OPENREG_FALLBACK": "allow", "OMP_NUM_THREADS": "unset"}
PATHS = ("native", "async", "sync", "copying")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # a key of TARGETS
    build: Callable[[str], Callable[[], Any]]  # device -> a call returning a tensor
    target: float | None = None  # openreg / CPU at most; None: the kind's (TARGETS)

    @property
    def limit(self) -> float:
        return TARGETS[self.kind] if self.target is None else self.target


def _tensors(device: str, *shapes: tuple[int, ...]) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g).to(device) for shape in shapes]


def _op(kind: str, name: str, shapes: list[tuple[int, ...]], call: Callable[..., Any],
        target: float | None = None) -> Case:
    def build(device: str) -> Callable[[], Any]:
        args = _tensors(device, *shapes)
        return lambda: call(*args)

    return Case(name, kind, build, target)


def _optimizer(name: str, make: Callable[..., torch.optim.Optimizer], **options: Any) -> Case:
    """One optimizer.step() on eight 256x256 parameters whose gradients stay set; the step
    returns the first parameter (a view, nothing read)."""
    def build(device: str) -> Callable[[], Any]:
        params = [p.requires_grad_() for p in _tensors(device, *[(256, 256)] * 8)]
        for p, g in zip(params, _tensors(device, *[(256, 256)] * 8), strict=True):
            p.grad = g * 1e-3
        optimizer = make(params, lr=1e-3, **options)

        def step() -> torch.Tensor:
            optimizer.step()
            return params[0].detach()

        return step

    form = "fused" if options.get("fused") else "foreach"
    extra = "".join(f", {k}={v}" for k, v in options.items() if k not in ("fused", "foreach"))
    return Case(f"{name}{extra}, {form}, 8x 256x256", "optimizer", build)


def _optimizers() -> list[Case]:
    optim = torch.optim
    cases = []
    for name, make, options in (("SGD", optim.SGD, {"momentum": 0.9}), ("Adam", optim.Adam, {}),
                                ("AdamW", optim.AdamW, {}), ("Adagrad", optim.Adagrad, {}),
                                ("RMSprop", optim.RMSprop, {})):
        cases.append(_optimizer(name, make, foreach=True, **options))
        if "fused" in inspect.signature(make).parameters:  # RMSprop has no fused form
            cases.append(_optimizer(name, make, fused=True, **options))
    return cases


def _host_read(name: str, read: Callable[[torch.Tensor], Any]) -> Case:
    """A host value read after queued work: (a + 1).sum() is queued, then read."""
    def build(device: str) -> Callable[[], Any]:
        (a,) = _tensors(device, (4,))
        return lambda: torch.tensor(read((a + 1).sum(0, keepdim=True)))

    return Case(name, "host read", build)


def _new_shapes(name: str, call: Callable[[torch.Tensor], Any]) -> Case:
    """A call whose input has a length no recent call had (1, 2, ... 4096, then again): the
    engine's shape cache (1,024 signatures per operator) never holds it, so each call asks the
    operator's Meta kernel, as a generation loop or a dynamically padded batch does."""
    def build(device: str) -> Callable[[], Any]:
        (base,) = _tensors(device, (4096, 16))
        lengths = itertools.count(1)
        return lambda: call(base[: next(lengths) % base.shape[0] + 1])

    return Case(name, "new shapes", build)


def _decode_attention(x: torch.Tensor) -> torch.Tensor:
    """One decode step's attention over the x.shape[0] cached positions (keys and values = x)."""
    scores = (x[-1:] @ x.t()) * 0.25
    return scores.softmax(-1) @ x


CASES = [
    _op("tiny", "add, 1 element", [(1,), (1,)], lambda a, b: a + b),
    _op("tiny", "view(-1), 8x8", [(8, 8)], lambda a: a.view(-1), target=1.1),
    _op("tiny", "t(), 8x8", [(8, 8)], lambda a: a.t(), target=1.1),
    _op("tiny", "copy_ device to device, 8x8", [(8, 8), (8, 8)], lambda dst, src: dst.copy_(src), target=1.1),
    _op("tiny", "mul_ in place, 8x8", [(8, 8)], lambda a: a.mul_(1.0)),
    _op("tiny", "relu, 8x8", [(8, 8)], torch.relu),
    _op("tiny", "sum, 8x8", [(8, 8)], torch.sum),
    _op("tiny", "mm, 8x8", [(8, 8), (8, 8)], torch.mm),
    _host_read("(a + 1).sum().item(), 4 elements", lambda t: t.item()),
    _host_read("bool((a + 1).sum()), 4 elements", bool),
    _host_read("(a + 1).sum().tolist(), 4 elements", lambda t: t.tolist()),
    _new_shapes("add, (n, 16), n new each call", lambda x: x + x),
    _new_shapes("relu, (n, 16), n new each call", torch.relu),
    _new_shapes("sum(0), (n, 16), n new each call", lambda x: x.sum(0)),
    _new_shapes("cat, 2x (n, 16), n new each call", lambda x: torch.cat([x, x])),
    _new_shapes("decode attention, n positions, n new each call", _decode_attention),
    _op("large", "matmul, 1024x1024", [(1024, 1024), (1024, 1024)], torch.matmul),
    _op("large", "conv2d, 16x64x56x56, 64 3x3 filters", [(16, 64, 56, 56), (64, 64, 3, 3)],
        lambda x, w: F.conv2d(x, w, padding=1)),
    _op("large", "softmax, 4096x1024, last dim", [(4096, 1024)], lambda x: F.softmax(x, -1)),
    _op("large", "layer_norm, 16x512x768", [(16, 512, 768), (768,), (768,)],
        lambda x, w, b: F.layer_norm(x, (768,), w, b)),
    *_optimizers(),
    *(Case(c.name, "training", c.build) for c in TRAINING_CASES),
]


def finish(device: str) -> None:
    if device == "openreg":
        torch.openreg.synchronize()


def seconds_per_call(fn: Callable[[], Any], calls: int, device: str) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    finish(device)
    return (time.perf_counter() - start) / calls


def calibrate(fn: Callable[[], Any], device: str, budget: float, calls: int = 1) -> int:
    """Calls per repeat so that a repeat lasts about `budget` seconds, starting from `calls`.

    Tiny cases start from many calls: one openreg call and its synchronize can take a
    millisecond when the worker has gone to sleep, and would make a few calls look enough."""
    while True:
        total = seconds_per_call(fn, calls, device) * calls
        if total >= budget / 10 or calls >= 1_000_000:
            return max(1, round(calls * budget / total))
        calls *= 10


def first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    cut = text.find(". ", 0, 240)
    return text[:cut + 1] if cut > 0 else (text if len(text) <= 240 else text[:240] + "...")


def bitwise_equal(kind: str, cpu_fn: Callable[[], Any], dev_fn: Callable[[], Any]) -> bool:
    """One call on each device (three steps for training), compared bit for bit."""
    calls = 3 if kind == "training" else 1
    cpu = [cpu_fn() for _ in range(calls)]
    dev = [dev_fn().cpu() for _ in range(calls)]
    return all(a.shape == b.shape and torch.equal(a, b) for a, b in zip(cpu, dev, strict=True))


def measure(case: Case, repeats: int) -> dict[str, Any]:
    """One row of the table; a case that fails on either device is skipped with its reason."""
    row: dict[str, Any] = {"case": case.name, "kind": case.kind, "target": case.limit}
    try:
        row.update(_measure(case, repeats))
    except Exception as error:  # noqa: BLE001 - any failure is reported, never hidden
        finish_quietly()
        row["skipped"] = f"{type(error).__name__}: {first_line(error)}"
    return row


def _measure(case: Case, repeats: int) -> dict[str, Any]:
    cpu_fn, dev_fn = case.build("cpu"), case.build("openreg")
    row: dict[str, Any] = {"equal_to_cpu": bitwise_equal(case.kind, cpu_fn, dev_fn)}
    with torch.openreg.count_paths() as paths:
        dev_fn()
        finish("openreg")
    row["paths_per_call"] = {k: paths[k] for k in PATHS}
    row["ledger_per_call"] = dict(paths)  # also copied_bytes, and any counter the ledger adds

    budget = BUDGETS[case.kind]
    start = MIN_CALLS[case.kind]
    calls = {"cpu": calibrate(cpu_fn, "cpu", budget, start), "openreg": calibrate(dev_fn, "openreg", budget, start)}
    samples: dict[str, list[float]] = {"cpu": [], "openreg": []}
    for _ in range(repeats):
        for device, fn in (("cpu", cpu_fn), ("openreg", dev_fn)):
            samples[device].append(seconds_per_call(fn, calls[device], device))
    for device in ("cpu", "openreg"):
        row[f"{device}_us"] = statistics.median(samples[device]) * 1e6
        row[f"{device}_us_range"] = [min(samples[device]) * 1e6, max(samples[device]) * 1e6]
        row[f"{device}_calls_per_repeat"] = calls[device]
    row["ratio"] = row["openreg_us"] / row["cpu_us"]
    row["meets_target"] = row["ratio"] <= (1.0 if case.kind == "training" else case.limit)
    return row


def finish_quietly() -> None:
    """Lets a task error from a failed case surface here, so the next case starts clean."""
    try:
        torch.openreg.synchronize()
    except Exception:  # noqa: BLE001  a kernel's error has the CPU's type (docs/errors.md)
        pass


def configuration(repeats: int) -> dict[str, Any]:
    parallel = torch.__config__.parallel_info()
    backend = next((line.split(":", 1)[1].strip() for line in parallel.splitlines()
                    if line.startswith("ATen parallel backend")), "unknown")
    return {
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "parallel_backend": backend,
        "environment": {name: os.environ.get(name, f"{default} (default)" if default != "unset" else default)
                        for name, default in RUNTIME_ENV.items()},
        "repeats": repeats,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def print_configuration(config: dict[str, Any]) -> None:
    env = ", ".join(f"{k}={v}" for k, v in config["environment"].items())
    print(f"engine_bench: torch {config['torch']}, {config['usable_cores']}/{config['cores']} cores usable, "
          f"torch threads {config['torch_threads']} (interop {config['interop_threads']}, "
          f"{config['parallel_backend']})")
    print(f"  {env}")
    print(f"  load average at start {config['load_average_at_start']}; medians of {config['repeats']} "
          f"alternating repeats; openreg timings end with synchronize()")
    print("  spread: slowest/fastest openreg repeat; =CPU: bitwise equal to the CPU; "
          "paths: native/async/sync/copying calls per call or step\n")


def print_header() -> None:
    print(f"{'case':<46}{'CPU us':>11}{'openreg us':>12}{'spread':>8}{'ratio':>8}{'target':>8}  "
          f"{'meets':<6}{'=CPU':<6}{'paths n/a/s/c':>15}")


def print_row(r: dict[str, Any], previous: dict[str, Any] | None) -> None:
    if previous is None or previous["kind"] != r["kind"]:
        print(f"-- {r['kind']} --")
    if "skipped" in r:
        print(f"{r['case']:<46}  SKIPPED: {r['skipped']}", flush=True)
        return
    low, high = r["openreg_us_range"]
    paths = "/".join(str(r["paths_per_call"][k]) for k in PATHS)
    print(f"{r['case']:<46}{r['cpu_us']:>11.1f}{r['openreg_us']:>12.1f}{'x' + format(high / low, '.2f'):>8}"
          f"{r['ratio']:>8.2f}{'<=' + format(r['target'], 'g'):>8}  {'yes' if r['meets_target'] else 'NO':<6}"
          f"{'yes' if r['equal_to_cpu'] else 'NO':<6}{paths:>15}", flush=True)


def summarize(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind: cases measured and skipped, how many meet the target, geometric means."""
    summary = {}
    for kind in TARGETS:
        rows = [r for r in results if r["kind"] == kind]
        timed = [r for r in rows if "skipped" not in r]
        if not rows:
            continue
        entry: dict[str, Any] = {"cases": len(rows), "skipped": len(rows) - len(timed),
                                 "meet_target": sum(r["meets_target"] for r in timed),
                                 "equal_to_cpu": sum(r["equal_to_cpu"] for r in timed)}
        if timed:
            for key in ("ratio", "cpu_us", "openreg_us"):
                entry[f"geomean_{key}"] = math.exp(statistics.fmean(math.log(r[key]) for r in timed))
        summary[kind] = entry
    return summary


def print_summary(summary: dict[str, Any]) -> None:
    print()
    for kind, s in summary.items():
        ratio = f"geometric mean ratio {s['geomean_ratio']:.2f}" if "geomean_ratio" in s else "nothing timed"
        skipped = f", {s['skipped']} skipped" if s["skipped"] else ""
        limit = "<= 1x each, geomean <= 0.9x" if kind == "training" else f"<= {TARGETS[kind]:g}x"
        print(f"{kind:<9} {s['meet_target']}/{s['cases'] - s['skipped']} meet {limit}, "
              f"{s['equal_to_cpu']} bitwise equal to the CPU{skipped}; {ratio}")


def write_json(document: dict[str, Any], path: str | None, echo: bool = True) -> None:
    if echo:
        print(json.dumps(document))
    if path:
        pathlib.Path(path).parent.mkdir(parents=True, exist_ok=True)
        pathlib.Path(path).write_text(json.dumps(document, indent=1) + "\n")


def select(cases: list[Case], only: str | None) -> list[Case]:
    """The cases of one kind (a key of TARGETS), or whose name contains `only`."""
    if only in TARGETS:
        return [c for c in cases if c.kind == only]
    return [c for c in cases if only is None or only.lower() in c.name.lower()]


def run(args: argparse.Namespace) -> dict[str, Any]:
    config = configuration(args.repeats)
    print_configuration(config)
    cases = select(CASES, args.only)
    if not cases:
        raise SystemExit(f"no case matches {args.only!r}; see --list")
    print_header()
    results: list[dict[str, Any]] = []
    for case in cases:
        results.append(measure(case, args.repeats))
        print_row(results[-1], results[-2] if len(results) > 1 else None)
    config["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize(results)
    print_summary(summary)
    return {"benchmark": "engine", "config": config, "results": results, "summary": summary}


# ---- thread sweep: one child process per configuration ----------------------------------------

def sweep(args: argparse.Namespace) -> dict[str, Any]:
    """Runs this script once per (torch threads, stream workers) pair, each in a fresh process:
    OpenMP threads that already ran a kernel keep their thread count, and the runtime reads
    OPENREG_STREAM_WORKERS once, so neither can be changed reliably within one process."""
    thread_counts = _counts(args.thread_sweep) or [torch.get_num_threads()]
    worker_counts = _counts(args.worker_sweep) or [None]
    runs = []
    for workers in worker_counts:
        for threads in thread_counts:
            env = dict(os.environ)
            if workers is not None:
                env["OPENREG_STREAM_WORKERS"] = str(workers)
            label = f"threads={threads}" + (f", OPENREG_STREAM_WORKERS={workers}" if workers is not None else "")
            print(f"===== {label} =====", flush=True)
            with tempfile.TemporaryDirectory() as tmp:
                out = pathlib.Path(tmp) / "run.json"
                command = [sys.executable, __file__, "--threads", str(threads), "--json", str(out),
                           "--repeats", str(args.repeats), "--no-print-json"]
                if args.only:
                    command += ["--only", args.only]
                subprocess.run(command, env=env, check=True)
                document = json.loads(out.read_text())
            document["label"] = label
            runs.append(document)
            print(flush=True)
    best = compare(runs)
    return {"benchmark": "engine-sweep", "runs": runs, "best": best}


def _counts(spec: str | None) -> list[int]:
    if spec is None:
        return []
    if spec == "cores":
        return list(range(1, len(os.sched_getaffinity(0)) + 1))
    return [int(x) for x in spec.split(",")]


def compare(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Prints openreg time (and ratio) per case for every configuration, and the best ones."""
    labels = [r["label"] for r in runs]
    width = max(24, *(len(label) + 2 for label in labels))
    print("===== comparison: openreg us (openreg/CPU) per configuration =====")
    print(f"{'case':<46}" + "".join(f"{label:>{width}}" for label in labels))
    names = [r["case"] for r in runs[0]["results"]]
    for i, name in enumerate(names):
        cells = []
        for run_ in runs:
            r = run_["results"][i]
            cells.append("skipped" if "skipped" in r else f"{r['openreg_us']:.1f} ({r['ratio']:.2f})")
        print(f"{name:<46}" + "".join(f"{c:>{width}}" for c in cells))
    best: dict[str, Any] = {}
    for kind in TARGETS:
        scored = [(run_["summary"][kind], run_["label"]) for run_ in runs
                  if kind in run_["summary"] and "geomean_openreg_us" in run_["summary"][kind]]
        if not scored:
            continue
        fastest = min(scored, key=lambda s: s[0]["geomean_openreg_us"])
        fastest_cpu = min(scored, key=lambda s: s[0]["geomean_cpu_us"])
        lowest = min(scored, key=lambda s: s[0]["geomean_ratio"])
        best[kind] = {"fastest_openreg": fastest[1], "fastest_cpu": fastest_cpu[1], "lowest_ratio": lowest[1]}
        print(f"{kind:<9} fastest openreg: {fastest[1]} (geomean {fastest[0]['geomean_openreg_us']:.1f} us); "
              f"fastest CPU: {fastest_cpu[1]}; lowest ratio: {lowest[1]} ({lowest[0]['geomean_ratio']:.2f})")
    return best


# ---- profile: where host time goes --------------------------------------------------------------

def profile(args: argparse.Namespace) -> None:
    matches = select(CASES, args.profile)
    if len(matches) != 1:
        names = "\n  ".join(c.name for c in (matches or CASES))
        raise SystemExit(f"--profile {args.profile!r} must name one case; candidates:\n  {names}")
    case = matches[0]
    print_configuration(configuration(args.repeats))
    cpu_fn, dev_fn = case.build("cpu"), case.build("openreg")
    for _ in range(3):
        cpu_fn(), dev_fn()
    finish("openreg")
    calls = calibrate(dev_fn, "openreg", 0.3, MIN_CALLS[case.kind])

    start = time.perf_counter()
    for _ in range(calls):
        dev_fn()
    launched = time.perf_counter() - start
    finish("openreg")
    completed = time.perf_counter() - start
    cpu = seconds_per_call(cpu_fn, calibrate(cpu_fn, "cpu", 0.3, MIN_CALLS[case.kind]), "cpu")
    print(f"{case.name}: {calls} calls on openreg; the host returns after {launched / calls * 1e6:.1f} us "
          f"per call, work completes after {completed / calls * 1e6:.1f} us; the CPU takes {cpu * 1e6:.1f} us\n")

    print("== torch.profiler, openreg: operators by self CPU time on the host (profiling adds overhead) ==")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            dev_fn()
        finish("openreg")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=60))

    print("== cProfile, openreg: Python functions by own time ==")
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        dev_fn()
    finish("openreg")
    profiler.disable()
    pstats.Stats(profiler, stream=sys.stdout).strip_dirs().sort_stats("tottime").print_stats(args.top)
    if args.perf:
        perf_profile(dev_fn, calls, args.top)


def perf_profile(fn: Callable[[], Any], calls: int, top: int, seconds: float = 3.0) -> None:
    """Samples this process with `perf record` while `fn` runs on openreg, and prints the share of
    each thread (the host is `python`, device workers `openreg<d>w<i>`) and the hottest native
    functions: where the time inside an operator call goes, which neither profiler above sees."""
    print("== perf, openreg: native functions by samples, per thread ==")
    if shutil.which("perf") is None:
        print("perf is not installed; skipped\n")
        return
    with tempfile.TemporaryDirectory() as tmp:
        data = str(pathlib.Path(tmp) / "perf.data")
        recorder = subprocess.Popen(["perf", "record", "-F", "1999", "-p", str(os.getpid()), "-o", data],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)  # perf attaches
        if recorder.poll() is not None:
            print(f"perf record failed: {recorder.stderr.read().strip()}\n")
            return
        try:
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:  # in batches that end with a synchronize: the host
                seconds_per_call(fn, calls, "openreg")  # must not queue more than it waits for
        finally:
            recorder.send_signal(signal.SIGINT)
            recorder.wait()
        threads = _perf_report(data, "--sort", "comm", "--percent-limit", "2")
        print("share of samples per thread: " + "; ".join(" ".join(line.split()) for line in threads))
        for line in threads:
            share, thread = line.split()[:2]
            print(f"\n-- {thread} ({share} of samples): hottest functions, as a share of this thread --")
            print("\n".join(_perf_report(data, "--comms", thread, "--percentage", "relative",
                                          "--sort", "dso,symbol")[:top]))
        print()


def _perf_report(data: str, *options: str) -> list[str]:
    report = subprocess.run(["perf", "report", "-i", data, "--stdio", "--no-children", "--no-inline", *options],
                            capture_output=True, text=True).stdout
    return [line[:160].rstrip() for line in report.splitlines() if line.strip() and not line.startswith("#")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("path", nargs="?", help="also write the JSON here (what `make bench` passes)")
    parser.add_argument("--json", dest="json_path", help="also write the JSON here")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads(N) before anything runs")
    parser.add_argument("--thread-sweep", nargs="?", const="cores", metavar="N,M",
                        help="one run per torch thread count (default: 1..usable cores), each in a fresh process")
    parser.add_argument("--worker-sweep", nargs="?", const="1,2", metavar="N,M",
                        help="also sweep OPENREG_STREAM_WORKERS (default: 1,2)")
    parser.add_argument("--only", metavar="TEXT", help="only the cases of this kind (tiny, host read, large, "
                        "optimizer, training) "
                        "or whose name contains TEXT")
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--profile", metavar="CASE", help="profile the host side of one case on openreg")
    parser.add_argument("--perf", action="store_true", help="with --profile: also sample native code with perf")
    parser.add_argument("--top", type=int, default=20, help="rows per profile table")
    parser.add_argument("--list", action="store_true", help="list the cases")
    parser.add_argument("--no-print-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.list:
        print("\n".join(f"{c.kind:<10}{c.name}" for c in CASES))
        return
    if args.threads:
        torch.set_num_threads(args.threads)  # before the first kernel, on any thread
    if args.thread_sweep or args.worker_sweep:
        document = sweep(args)
    else:
        torch.openreg.init()
        if args.profile:
            profile(args)
            return
        document = run(args)
    write_json(document, args.json_path or args.path, echo=not args.no_print_json)


if __name__ == "__main__":
    main()
