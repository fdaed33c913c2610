"""What the debug modes and memory history cost when on: time per operator call (a chain of small
elementwise operators) and per training step (the demo's classifier, batch 64) with each mode on,
against the same loop with every mode off, in the same run. Prints the ratios and writes JSON.

`make bench-debug`. Off, the modes run nothing per operator (TorchDispatchModes not entered); the
C++ hooks are one relaxed atomic load per allocation, free, event call and kernel launch.
"""

import json
import os
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples"))
from train_classifier import build_model, make_images

from torch_openreg.openreg import debug


def ops(x: torch.Tensor, n: int = 200) -> None:
    for _ in range(n):
        x = x * 1.0001 + 0.5
    torch.openreg.synchronize()


def steps(model, optimizer, images, labels, n: int = 3) -> None:
    for _ in range(n):
        optimizer.zero_grad()
        F.cross_entropy(model(images), labels).backward()
        optimizer.step()
    torch.openreg.synchronize()


def best_of(fn, repeats: int = 3) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


class History:
    def __enter__(self):
        torch.openreg.memory._record_memory_history(stacks="python", clear_history=True)

    def __exit__(self, *exc):
        torch.openreg.memory._record_memory_history(enabled=None, clear_history=True)


def main() -> None:
    x = torch.rand(1000, device="openreg")
    images, labels = make_images(64, torch.Generator().manual_seed(1))
    images, labels = images.to("openreg"), labels.to("openreg")
    model = build_model().to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    modes = {
        "off": None,
        "memory history": History,
        "check_finite": debug.check_finite,
        "stream_sanitizer": debug.stream_sanitizer,
        "compare_with_cpu": debug.compare_with_cpu,
    }
    results = {}
    for name, mode in modes.items():
        row = {}
        for label, fn in (("400 ops", lambda: ops(x)), ("3 steps", lambda: steps(model, optimizer, images, labels))):
            if mode is None:
                fn()
                row[label] = best_of(fn)
            else:
                with mode():
                    fn()
                    row[label] = best_of(fn)
        results[name] = row
    load = os.getloadavg()[0]
    print(f"debug modes, cost when on (load average {load:.1f}); best of 3")
    print(f"{'mode':<18}{'per op (us)':>14}{'ratio':>8}{'per step (ms)':>16}{'ratio':>8}")
    for name, row in results.items():
        per_op = row["400 ops"] / 400 * 1e6
        per_step = row["3 steps"] / 3 * 1e3
        print(
            f"{name:<18}{per_op:>14.1f}{per_op / (results['off']['400 ops'] / 400 * 1e6):>8.1f}"
            f"{per_step:>16.1f}{per_step / (results['off']['3 steps'] / 3 * 1e3):>8.1f}"
        )
    # Off against a build without the hooks: process CPU time (every thread), which the machine's
    # load disturbs less than wall time; median of 7. Run the same on the other build to compare.
    ops(x, 2000)
    cpu = []
    for _ in range(7):
        start = time.process_time()
        ops(x, 2000)
        cpu.append(time.process_time() - start)
    results["off"]["cpu time per op"] = sorted(cpu)[3] / 4000
    print(f"off: {results['off']['cpu time per op'] * 1e6:.2f} us process CPU time per op (median of 7)")
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump({"load_average": load, "seconds": results}, f, indent=2)


if __name__ == "__main__":
    main()
