"""Fragmentation of the caching allocator under variable sequence lengths, with fixed segments and
with expandable segments (docs/memory.md, "Expandable segments").

A small transformer encoder trains on openreg for a number of steps, each step on a batch of a
random sequence length (the same seeded lengths for every configuration). Reported per
configuration: the peak bytes tensors held (max_memory_allocated), the peak bytes the allocator
reserved from the device (max_memory_reserved), their ratio (1.0 would be no waste), the device
calls the allocator made, and the step time against the CPU in the same process. Each
configuration runs in a fresh process, since the allocator's settings are process-wide.

    memory_bench.py [--steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
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
    stats = torch.openreg.memory_stats()
    segments = torch.openreg.memory_snapshot()
    return {
        "peak_allocated": stats["allocated_bytes.all.peak"],
        "peak_reserved": stats["reserved_bytes.all.peak"],
        "device_allocs": stats["num_device_alloc"],
        "device_frees": stats["num_device_free"],
        "retries": stats["num_alloc_retries"],
        "snapshot_equals_reserved": sum(s["total_size"] for s in segments) == torch.openreg.memory_reserved(),
        "losses_equal": cpu_losses == dev_losses,
        "time_ratio": dev_time / cpu_time,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--json", type=str, default=None)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.steps)))
        return 0
    results = {}
    for name, settings in CONFIGURATIONS.items():
        env = dict(os.environ, PYTORCH_OPENREG_ALLOC_CONF=settings)
        out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(args.steps)], env=env,
                             capture_output=True, text=True, check=True)
        results[name] = json.loads(out.stdout.strip().splitlines()[-1])
    mib = 1 << 20
    print(f"{args.steps} training steps, sequence lengths 16-512, batch 8, 4-layer encoder of width 256")
    print(f"{'configuration':<22}{'peak allocated':>16}{'peak reserved':>15}{'reserved/alloc':>16}"
          f"{'device calls':>14}{'losses = CPU':>14}{'time / CPU':>12}")
    for name, r in results.items():
        print(f"{name:<22}{r['peak_allocated'] / mib:>12.1f} MiB{r['peak_reserved'] / mib:>11.1f} MiB"
              f"{r['peak_reserved'] / r['peak_allocated']:>16.3f}{r['device_allocs'] + r['device_frees']:>14}"
              f"{r['losses_equal']!s:>14}{r['time_ratio']:>12.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
