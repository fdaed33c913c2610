"""Fragmentation of the caching allocator, with fixed segments and with expandable segments
(docs/memory.md, "Expandable segments"), on two workloads.

Training: a small transformer encoder trains on openreg for a number of steps, each step on a batch
of a random sequence length (the same seeded lengths for every configuration). Reported per
configuration: the peak bytes tensors held (max_memory_allocated), the peak bytes the allocator
reserved from the device (max_memory_reserved), their ratio (1.0 would be no waste), the device
calls the allocator made, and the step time against the CPU in the same process.

Variable sizes: each step allocates twelve temporary tensors of seeded random sizes between 1 and
47 MiB, then one more that is kept (the kept set grows by one a step, each kept tensor past its
step's temporaries), then frees the temporaries. Measured two ways:
- with torch.openreg.empty_cache() after each step's frees: the peak reserved over the peak
  allocated, i.e. what stays reserved when the cache gives back all it can;
- with no call at all, on devices of a given capacity (OPENREG_DEVICE_MEMORY), so that only the
  allocator's own out-of-memory retry gives memory back: the smallest capacity, found by bisection,
  at which the whole run completes, over the peak allocated.

Each run is a fresh process, since the allocator's settings are process-wide.

    memory_bench.py [--steps N] [--variable-steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time

CONFIGURATIONS = {
    "fixed segments": "",
    "expandable segments": "expandable_segments:True",
}


def child(steps: int) -> dict:
    import torch
    import torch.nn as nn

    import torch_openreg  # noqa: F401

    torch.manual_seed(0)
    lengths = torch.randint(16, 513, (steps,), generator=torch.Generator().manual_seed(1)).tolist()

    def make():
        torch.manual_seed(0)
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        return nn.Sequential(nn.TransformerEncoder(layer, 4), nn.Linear(256, 256))

    def run(device: str) -> tuple[float, list[float]]:
        model = make().to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        losses = []
        start = time.perf_counter()
        for step, length in enumerate(lengths):
            g = torch.Generator().manual_seed(step)
            x = torch.randn(8, length, 256, generator=g).to(device)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.item())
        if device == "openreg":
            torch.openreg.synchronize()
        return time.perf_counter() - start, losses

    cpu_time, cpu_losses = run("cpu")
    torch.openreg.reset_peak_memory_stats()
    dev_time, dev_losses = run("openreg")
    return {
        **allocator_figures(),
        "losses_equal": cpu_losses == dev_losses,
        "time_ratio": dev_time / cpu_time,
    }


def allocator_figures() -> dict:
    """What the allocator did in this process: peaks, device calls, retries, and whether the
    snapshot's segments add up to the reserved bytes."""
    import torch

    stats = torch.openreg.memory_stats()
    segments = torch.openreg.memory_snapshot()
    return {
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "device_allocs": stats["num_device_alloc"],
        "device_frees": stats["num_device_free"],
        "retries": stats["num_alloc_retries"],
        "snapshot_equals_reserved": sum(s["total_size"] for s in segments) == torch.openreg.memory_reserved(),
    }


VARIABLE_TEMPORARIES = 12  # allocated and freed each step, beside one kept tensor
MiB = 1 << 20


def child_variable(steps: int, empty_cache: bool) -> dict:
    import torch

    import torch_openreg  # noqa: F401

    rng = random.Random(0)
    kept = []
    completed = 0
    try:
        for _ in range(steps):
            sizes = [rng.randint(MiB + 1, 47 * MiB) for _ in range(VARIABLE_TEMPORARIES + 1)]
            temporaries = [torch.empty(n, dtype=torch.uint8, device="openreg") for n in sizes[:-1]]
            kept.append(torch.empty(sizes[-1], dtype=torch.uint8, device="openreg"))
            del temporaries
            if empty_cache:
                torch.openreg.empty_cache()
            completed += 1
    except torch.OutOfMemoryError:
        pass
    return {"completed": completed == steps, **allocator_figures()}


def run_child(args: list[str], env: dict) -> dict:
    out = subprocess.run([sys.executable, __file__, "--child", *args], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def least_capacity(steps: int, env: dict, peak_allocated: int) -> tuple[float, dict]:
    """The smallest capacity, as a multiple of peak_allocated to within 0.01, at which the variable
    workload completes with no empty_cache call (bisection between 1 and 3)."""
    low, high = 1.0, 3.0
    best = None
    while high - low > 0.01:
        ratio = (low + high) / 2
        capacity = int(peak_allocated * ratio) // MiB * MiB
        got = run_child(["variable", "--variable-steps", str(steps)], dict(env, OPENREG_DEVICE_MEMORY=str(capacity)))
        if got["completed"]:
            high, best = ratio, got
        else:
            low = ratio
    return high, best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--variable-steps", type=int, default=30)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--child", type=str, choices=["training", "variable", "variable-empty-cache"],
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child == "training":
        print(json.dumps(child(args.steps)))
        return 0
    if args.child is not None:
        print(json.dumps(child_variable(args.variable_steps, args.child == "variable-empty-cache")))
        return 0
    results, variable = {}, {}
    for name, settings in CONFIGURATIONS.items():
        env = dict(os.environ, PYTORCH_OPENREG_ALLOC_CONF=settings)
        results[name] = run_child(["training", "--steps", str(args.steps)], env)
        emptied = run_child(["variable-empty-cache", "--variable-steps", str(args.variable_steps)], env)
        ratio, pressed = least_capacity(args.variable_steps, env, emptied["peak_allocated"])
        variable[name] = {"empty_cache": emptied, "least_capacity_ratio": ratio, "at_least_capacity": pressed}
    mib = MiB
    print(f"{args.steps} training steps, sequence lengths 16-512, batch 8, 4-layer encoder of width 256")
    print(f"{'configuration':<22}{'peak allocated':>16}{'peak reserved':>15}{'reserved/alloc':>16}"
          f"{'device calls':>14}{'losses = CPU':>14}{'time / CPU':>12}")
    for name, r in results.items():
        print(f"{name:<22}{r['peak_allocated'] / mib:>12.1f} MiB{r['peak_reserved'] / mib:>11.1f} MiB"
              f"{r['peak_reserved'] / r['peak_allocated']:>16.3f}{r['device_allocs'] + r['device_frees']:>14}"
              f"{r['losses_equal']!s:>14}{r['time_ratio']:>12.2f}")
    print()
    print(f"{args.variable_steps} steps of {VARIABLE_TEMPORARIES} temporary tensors of 1-47 MiB and one kept")
    print(f"{'configuration':<22}{'peak allocated':>16}{'peak reserved':>15}{'reserved/alloc':>16}"
          f"{'device calls':>14}{'least capacity/alloc':>22}")
    for name, v in variable.items():
        r = v["empty_cache"]
        assert r["completed"] and r["snapshot_equals_reserved"], r
        print(f"{name:<22}{r['peak_allocated'] / mib:>12.1f} MiB{r['peak_reserved'] / mib:>11.1f} MiB"
              f"{r['peak_reserved'] / r['peak_allocated']:>16.3f}{r['device_allocs'] + r['device_frees']:>14}"
              f"{v['least_capacity_ratio']:>22.2f}")
    print("(reserved/alloc: with empty_cache() after each step; least capacity: with no call, the smallest "
          "device on which the run completes)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"training": results, "variable sizes": variable}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
