"""Mixed-precision training on openreg against float32 training, and both against the CPU.

For the MLP and the transformer LM of bench/models.py, one training step (zero_grad, forward
under autocast, GradScaler-scaled backward, fused AdamW step through the scaler, scaler update) is
timed in three modes: float32 without autocast, autocast float16, autocast bfloat16. Each mode runs
on the CPU (CPU autocast, its own policy) and on openreg (CUDA's policy, Note [Autocast policy]).
Printed per mode: median step time on each device, openreg/CPU, the mode's time over float32's on
the same device, and the openreg ledger of one step (sync must be 0: no host synchronization).

    python bench/amp_bench.py [--repeats 7] [--steps 10]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

import torch_openreg  # noqa: F401
from models import TransformerLM

MODES = {"float32": None, "autocast float16": torch.float16, "autocast bfloat16": torch.bfloat16}


def mlp(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    x, y = torch.randn(128, 256), torch.randint(0, 10, (128,))
    return model.to(device), x.to(device), y.to(device), lambda out, y: F.cross_entropy(out, y)


def transformer(device: str):
    torch.manual_seed(0)
    model = TransformerLM(1000, 64, d_model=128, heads=4, layers=2)
    text = torch.randint(0, 1000, (16, 65))
    return (model.to(device), text[:, :-1].to(device), text[:, 1:].to(device),
            lambda out, y: F.cross_entropy(out.flatten(0, 1), y.flatten()))


MODELS = {"MLP (256-512-512-10, batch 128)": mlp, "transformer LM (2x128, seq 64)": transformer}


def stepper(build: Callable, device: str, dtype: torch.dtype | None) -> Callable[[], torch.Tensor]:
    model, x, y, loss_of = build(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=True)
    scaler = torch.amp.GradScaler(device, enabled=dtype is not None)

    def step() -> torch.Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=dtype or torch.float16, enabled=dtype is not None):
            loss = loss_of(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def finish(device: str) -> None:
    if device == "openreg":
        torch.openreg.synchronize()


def median_step(step: Callable, device: str, steps: int, repeats: int) -> float:
    for _ in range(3):
        step()
    finish(device)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        finish(device)
        times.append((time.perf_counter() - start) / steps)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; medians of {args.repeats} x "
          f"{args.steps} steps")
    print(f"{'model':34} {'mode':18} {'CPU ms':>8} {'openreg ms':>10} {'or/CPU':>7} {'CPU/fp32':>8} "
          f"{'or/fp32':>8}  openreg paths per step n/a/s/c")
    for name, build in MODELS.items():
        base: dict[str, float] = {}
        for mode, dtype in MODES.items():
            times = {d: median_step(stepper(build, d, dtype), d, args.steps, args.repeats) for d in ("cpu", "openreg")}
            step = stepper(build, "openreg", dtype)
            step()
            with torch.openreg.count_paths() as paths:
                step()
            base = base or times
            print(f"{name:34} {mode:18} {times['cpu'] * 1e3:8.2f} {times['openreg'] * 1e3:10.2f} "
                  f"{times['openreg'] / times['cpu']:7.2f} {times['cpu'] / base['cpu']:8.2f} "
                  f"{times['openreg'] / base['openreg']:8.2f}  "
                  f"{paths['native']}/{paths['async']}/{paths['sync']}/{paths['copying']}")


if __name__ == "__main__":
    main()
