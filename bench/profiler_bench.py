"""What the profiler costs per operator call: the same loop of operator calls run with no profiler,
under torch.profiler with CPU activity only, and with CPU and openreg (PrivateUse1) activity, on
openreg and on the CPU in the same process.

Each case runs CALLS calls and, on openreg, ends with torch.openreg.synchronize() (completed work,
not launches). Repeats alternate between the modes so that a noisy neighbour hits all alike; each
figure is the median of REPEATS. The CPU column is the same loop on CPU tensors (no device
activity to record: its profiled figures show what Kineto's CPU-side recording costs).

    profiler_bench.py [--calls N] [--repeats N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

import torch_openreg  # noqa: F401

CASES = {
    "add_ 16 floats": lambda d: (torch.ones(16, device=d), lambda x: x.add_(1.0)),
    "mm 128x128": lambda d: (torch.ones(128, 128, device=d), lambda x: torch.mm(x, x)),
}
MODES = {
    "off": None,
    "cpu-only profile": [ProfilerActivity.CPU],
    "cpu+openreg profile": [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
}


def run(device: str, case: str, activities, calls: int) -> float:
    """Microseconds per call."""
    x, op = CASES[case](device)
    sync = torch.openreg.synchronize if device == "openreg" else (lambda: None)
    sync()
    if activities is None:
        start = time.perf_counter()
        for _ in range(calls):
            op(x)
        sync()
        return (time.perf_counter() - start) / calls * 1e6
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(calls):
            op(x)
        sync()
        elapsed = time.perf_counter() - start
    del prof
    return elapsed / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", dest="json_path")
    args = parser.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}, {args.calls} calls per repeat, median of {args.repeats}")
    results = []
    for case in CASES:
        for device in ("openreg", "cpu"):
            run(device, case, None, args.calls // 4)  # warm up
        samples = {(d, m): [] for d in ("openreg", "cpu") for m in MODES}
        for _ in range(args.repeats):
            for mode, activities in MODES.items():
                for device in ("openreg", "cpu"):
                    samples[(device, mode)].append(run(device, case, activities, args.calls))
        base = statistics.median(samples[("openreg", "off")])
        for mode in MODES:
            ours = statistics.median(samples[("openreg", mode)])
            cpu = statistics.median(samples[("cpu", mode)])
            print(
                f"{case:16s} {mode:20s} openreg {ours:8.2f} us/call ({ours / base:5.2f}x off)   "
                f"cpu {cpu:8.2f} us/call   openreg/cpu {ours / cpu:5.2f}"
            )
            results.append({"case": case, "mode": mode, "openreg_us": ours, "cpu_us": cpu})
    if args.json_path:
        with open(args.json_path, "w") as f:
            json.dump({"benchmark": "profiler", "load_average": os.getloadavg()[0], "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
