"""The main job of `make demo`: a convolutional classifier trained on openreg, step for step
beside the CPU.

The data is made here: noisy 32x32 images of eight shapes (disk, ring, square, frame, plus,
cross, stripes, triangle) at random places, sizes and brightness. The same model, data and seed
train on openreg:0 and on the CPU, in alternating blocks of steps, so the two losses print side
by side as training goes. Then the demo shows what the device did: whether every loss and every
parameter is bitwise equal to the CPU's, test accuracy, time per step against the CPU, peak
device memory, the path each operator call took (docs/operators.md), and a profile of a few
more steps: device time per stream row and per operator, and where the trace was written
(docs/profiling.md).

Everything the loop needs lives on the device before it starts: the images, and the indices of
every batch (drawn on the CPU from a seeded generator). A step then launches work and returns;
only reading a loss for the printout makes the host wait.
"""

import json
import math
import os
import pathlib
import time

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

SHAPES = ("disk", "ring", "square", "frame", "plus", "cross", "stripes", "triangle")
SIZE, TRAIN, TEST = 32, 4096, 1024
STEPS, BATCH, PRINT_EVERY = 300, 64, 25
PROFILED_STEPS = 3
TRACE_PATH = pathlib.Path(os.environ.get("OPENREG_DEMO_TRACE", "build/demo/openreg_trace.json"))
PATHS = ("native", "async", "sync", "copying")


def make_images(count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """`count` noisy images of the eight shapes, with their labels."""
    labels = torch.randint(0, len(SHAPES), (count,), generator=generator)

    def uniform(low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(count, 1, 1, generator=generator)

    coords = torch.linspace(-1, 1, SIZE)
    y, x = coords.view(1, -1, 1), coords.view(1, 1, -1)
    dx, dy = x - uniform(-0.4, 0.4), y - uniform(-0.4, 0.4)
    size, width = uniform(0.3, 0.55), uniform(0.07, 0.12)
    radius, box = (dx**2 + dy**2).sqrt(), torch.maximum(dx.abs(), dy.abs())
    stripes = torch.sin(dy * uniform(12, 18) + uniform(0, 6.3)) > 0.3
    masks = torch.stack([  # in the order of SHAPES
        radius < size,
        (radius - size).abs() < width,
        box < 0.8 * size,
        (box - 0.8 * size).abs() < width,
        ((dx.abs() < width) | (dy.abs() < width)) & (box < size),
        (((dx - dy).abs() < 1.4 * width) | ((dx + dy).abs() < 1.4 * width)) & (box < size),
        stripes & (box < size),
        (dy < 0.6 * size) & (dy > 2 * dx.abs() - size),
    ])
    shape = masks[labels, torch.arange(count)].float()
    images = uniform(0.6, 1.2) * shape + 0.35 * torch.randn(count, SIZE, SIZE, generator=generator)
    return images.unsqueeze(1), labels


def build_model() -> nn.Module:
    def block(cin: int, cout: int) -> list[nn.Module]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]

    return nn.Sequential(*block(1, 8), *block(8, 16), *block(16, 32), nn.Flatten(),
                         nn.Linear(32 * 4 * 4, 64), nn.ReLU(), nn.Linear(64, len(SHAPES)))


class Run:
    """One device's copy of the experiment: the model, its optimizer and schedule, and the data."""

    def __init__(self, device: str, data: dict[str, torch.Tensor]) -> None:
        torch.manual_seed(0)
        self.model = build_model().to(device)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
        self.schedule = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, STEPS)
        self.data = {name: tensor.to(device) for name, tensor in data.items()}
        self.losses: list[torch.Tensor] = []
        self.seconds = 0.0

    def train(self, steps: range) -> float:
        """Runs the steps, waits for the device, returns the last loss; adds to self.seconds."""
        start = time.perf_counter()
        for step in steps:
            batch = self.data["batches"][step]
            self.optimizer.zero_grad()
            loss = F.cross_entropy(self.model(self.data["train_images"][batch]), self.data["train_labels"][batch])
            loss.backward()
            self.optimizer.step()
            self.schedule.step()
            self.losses.append(loss.detach())
        last = self.losses[-1].item()  # a host read: waits for the device
        self.seconds += time.perf_counter() - start
        return last

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        self.model.eval()
        predictions = self.model(self.data["test_images"]).argmax(1).cpu()
        self.model.train()
        return predictions

    def state(self) -> list[torch.Tensor]:
        return [t.detach().cpu() for t in self.model.state_dict().values()]


def profile_steps(run: Run) -> None:
    """Profiles a few steps with device activity, prints what each stream row of the trace holds
    and the operators that used the most device time, and says where the trace is."""
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        run.train(range(PROFILED_STEPS))
    TRACE_PATH.parent.mkdir(parents=True, exist_ok=True)
    prof.export_chrome_trace(str(TRACE_PATH))
    events = json.loads(TRACE_PATH.read_text())["traceEvents"]
    rows = {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == "thread_name":
            rows.setdefault((e["pid"], e["tid"]), e["args"]["name"])
    tasks = [e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    print(f"{'row (device, stream)':<24} {'tasks':>6} {'busy ms':>9} {'span ms':>9} {'busy %':>7}  longest tasks")
    for pid, tid in sorted({(e["pid"], e["tid"]) for e in tasks}):
        mine = [e for e in tasks if (e["pid"], e["tid"]) == (pid, tid)]
        busy = sum(e["dur"] for e in mine) / 1e3
        span = (max(e["ts"] + e["dur"] for e in mine) - min(e["ts"] for e in mine)) / 1e3
        by_name = {}
        for e in mine:
            by_name[e["name"]] = by_name.get(e["name"], 0.0) + e["dur"] / 1e3
        longest = ", ".join(f"{n} {t:.1f} ms" for n, t in sorted(by_name.items(), key=lambda kv: -kv[1])[:3])
        print(f"{f'openreg:{pid}, ' + rows.get((pid, tid), str(tid)):<24} {len(mine):>6} {busy:>9.2f} "
              f"{span:>9.2f} {busy / span * 100 if span else 0:>6.1f}%  {longest}")
    averages = sorted(
        (e for e in prof.key_averages() if e.self_device_time_total > 0 and not e.key.endswith(" kernel")
         and e.key not in {e2["name"] for e2 in tasks}),
        key=lambda e: -e.self_device_time_total,
    )
    print("operators with the most device time: " + ", ".join(
        f"{e.key} {e.self_device_time_total / 1e3:.1f} ms ({e.count} calls)" for e in averages[:5]))
    print(f"trace written to {TRACE_PATH.resolve()} (open it in https://ui.perfetto.dev)")


def main() -> None:
    o = torch.openreg
    o.init()
    print("== OpenReg demo: a CNN trained on openreg:0, checked step by step against the CPU ==")
    print(f"device: {o.get_device_name(0)}, {o.device_count()} devices of "
          f"{o.get_device_properties(0).total_memory / 2**30:.1f} GiB; "
          f"torch threads {torch.get_num_threads()}, "
          f"OPENREG_STREAM_WORKERS={os.environ.get('OPENREG_STREAM_WORKERS', '1 (default)')}")

    generator = torch.Generator().manual_seed(1)
    train_images, train_labels = make_images(TRAIN, generator)
    test_images, test_labels = make_images(TEST, generator)
    epochs = math.ceil(STEPS * BATCH / TRAIN)
    order = torch.cat([torch.randperm(TRAIN, generator=generator) for _ in range(epochs)])
    data = {"train_images": train_images, "train_labels": train_labels, "test_images": test_images,
            "batches": order[:STEPS * BATCH].view(STEPS, BATCH)}
    parameters = sum(p.numel() for p in build_model().parameters())
    print(f"data: {TRAIN} training and {TEST} test images, {SIZE}x{SIZE}, of {len(SHAPES)} shapes "
          f"({', '.join(SHAPES)}), generated here")
    print(f"model: 3 x (conv 3x3, batch norm, ReLU, max pool), 2 linear layers; {parameters:,} parameters; "
          f"SGD with momentum, cosine schedule; batch {BATCH}, {STEPS} steps (~{epochs} epochs)\n")

    o.reset_peak_memory_stats(0)
    allocations_before = o.memory_stats(0)["num_device_alloc"]
    device, cpu = Run("openreg", data), Run("cpu", data)

    print(f"{'step':>5}  {'loss openreg':>14}  {'loss CPU':>14}  {'equal':>5}  "
          f"{'ms/step openreg':>15}  {'ms/step CPU':>11}  {'ratio':>5}")
    with o.count_paths() as paths:
        for first in range(0, STEPS, PRINT_EVERY):
            steps = range(first, min(first + PRINT_EVERY, STEPS))
            before_device, before_cpu = device.seconds, cpu.seconds
            loss_device, loss_cpu = device.train(steps), cpu.train(steps)
            ms_device = (device.seconds - before_device) / len(steps) * 1e3
            ms_cpu = (cpu.seconds - before_cpu) / len(steps) * 1e3
            if first == 0:
                warm_device, warm_cpu = device.seconds, cpu.seconds
            equal = "yes" if torch.equal(device.losses[-1].cpu(), cpu.losses[-1]) else "NO"
            print(f"{steps[-1] + 1:>5}  {loss_device:>14.8f}  {loss_cpu:>14.8f}  {equal:>5}  "
                  f"{ms_device:>15.2f}  {ms_cpu:>11.2f}  {ms_device / ms_cpu:>5.2f}")
    train_allocations = o.memory_stats(0)["num_device_alloc"] - allocations_before
    train_peak = o.max_memory_allocated(0)
    predictions_device = device.predict()
    predictions_cpu = cpu.predict()

    losses_equal = torch.equal(torch.stack(device.losses).cpu(), torch.stack(cpu.losses))
    state_device, state_cpu = device.state(), cpu.state()
    equal_tensors = sum(torch.equal(a, b) for a, b in zip(state_device, state_cpu, strict=True))
    largest = max((a - b).abs().max().item() for a, b in zip(state_device, state_cpu, strict=True)
                  if a.is_floating_point())
    print("\n== against the CPU ==")
    print(f"all {STEPS} losses bitwise equal: {'yes' if losses_equal else 'NO'}")
    print(f"parameters and buffers bitwise equal: {equal_tensors}/{len(state_cpu)} tensors"
          + ("" if equal_tensors == len(state_cpu) else f" (largest difference {largest:.3g})"))
    accuracy = {name: (p == test_labels).float().mean().item() for name, p in
                (("openreg", predictions_device), ("CPU", predictions_cpu))}
    print(f"test accuracy: openreg {accuracy['openreg']:.3f}, CPU {accuracy['CPU']:.3f}; "
          f"same {TEST} predictions: {'yes' if torch.equal(predictions_device, predictions_cpu) else 'NO'}")

    print("\n== time (the machine may be shared: compare the columns of one run, not runs) ==")
    steady, steady_device, steady_cpu = STEPS - PRINT_EVERY, device.seconds - warm_device, cpu.seconds - warm_cpu
    print(f"all {STEPS} steps: openreg {device.seconds:.2f} s, CPU {cpu.seconds:.2f} s, "
          f"openreg/CPU {device.seconds / cpu.seconds:.2f}x")
    print(f"after the first {PRINT_EVERY} (warm-up): {steady_device / steady * 1e3:.2f} ms per step on openreg, "
          f"{steady_cpu / steady * 1e3:.2f} ms on the CPU, openreg/CPU {steady_device / steady_cpu:.2f}x")

    print("\n== memory on openreg:0 ==")
    print(f"peak allocated {train_peak / 2**20:.2f} MiB in training (data included), "
          f"{o.max_memory_allocated(0) / 2**20:.2f} MiB with the test predictions; reserved "
          f"{o.memory_reserved(0) / 2**20:.2f} MiB; {train_allocations} device allocations during training "
          f"(the caching allocator served the rest)")

    print("\n== operator calls on openreg during training, by path (docs/operators.md) ==")
    calls = sum(paths[k] for k in PATHS)
    print(f"{calls} calls, {calls / STEPS:.0f} per step: " + ", ".join(f"{k} {paths[k]}" for k in PATHS))
    print(f"bytes copied to the CPU and back by the copying fallback: {paths['copied_bytes']}")
    others = {k: v for k, v in paths.items() if k not in (*PATHS, "copied_bytes")}
    if others:
        print("other counters: " + ", ".join(f"{k} {v}" for k, v in others.items()))

    print(f"\n== profile of {PROFILED_STEPS} more steps on openreg (docs/profiling.md) ==")
    profile_steps(device)

    if not (losses_equal and equal_tensors == len(state_cpu)):
        raise SystemExit("openreg and CPU results differ")


if __name__ == "__main__":
    main()
