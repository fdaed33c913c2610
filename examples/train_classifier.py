"""The main job of `make demo`: a small convolutional classifier trained on openreg.

It trains the same model, on the same synthetic data and with the same seed, on openreg and on the
CPU, then shows what the device did: the loss curve, whether every parameter ended bitwise equal
to the CPU's, time on each, memory, and the path each operator call took.
"""

import time

import torch
import torch.nn.functional as F

STEPS, BATCH, CLASSES = 60, 64, 4


def make_data(generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Noisy 16x16 images of four patterns: horizontal, vertical, diagonal stripes, a blob."""
    labels = torch.randint(0, CLASSES, (BATCH * 4,), generator=generator)
    ys, xs = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    patterns = torch.stack([torch.sin(ys), torch.sin(xs), torch.sin(xs + ys), torch.exp(-((xs - 8) ** 2 + (ys - 8) ** 2) / 20)])
    images = patterns[labels].unsqueeze(1) + 1.5 * torch.randn(BATCH * 4, 1, 16, 16, generator=generator)
    return images, labels


def build_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 32), torch.nn.ReLU(), torch.nn.Linear(32, CLASSES),
    )


def train(device: str) -> tuple[list[float], list[torch.Tensor], float, float]:
    torch.manual_seed(0)
    images, labels = make_data(torch.Generator().manual_seed(1))
    images, labels = images.to(device), labels.to(device)
    model = build_model().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    start = time.perf_counter()
    for step in range(STEPS):
        batch = slice((step % 4) * BATCH, (step % 4 + 1) * BATCH)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
        if step % 10 == 9:
            losses.append(loss.item())  # a host read: synchronizes
    with torch.no_grad():
        accuracy = (model(images).argmax(1) == labels).float().mean().item()
    elapsed = time.perf_counter() - start
    return losses, [p.detach().cpu() for p in model.parameters()], accuracy, elapsed


def main() -> None:
    o = torch.openreg
    print(f"openreg: {o.device_count()} devices, {o.get_device_name(0)}, "
          f"{o.get_device_properties(0)['total_memory'] / 2**30:.1f} GiB each")
    print(f"training a {sum(p.numel() for p in build_model().parameters())}-parameter CNN for {STEPS} steps "
          f"on openreg:0 and on the CPU\n")
    o.init()
    o.reset_peak_memory_stats(0)
    allocs_before = o.memory_stats(0)["num_device_alloc"]
    with o.count_paths() as paths:
        losses_o, params_o, accuracy_o, time_o = train("openreg")
    losses_c, params_c, accuracy_c, time_c = train("cpu")

    print("step   loss on openreg   loss on CPU")
    for i, (lo, lc) in enumerate(zip(losses_o, losses_c)):
        print(f"{(i + 1) * 10:>4}   {lo:>15.6f}   {lc:>11.6f}")
    same = all(torch.equal(a, b) for a, b in zip(params_o, params_c))
    print(f"\naccuracy: openreg {accuracy_o:.3f}, CPU {accuracy_c:.3f}")
    print(f"parameters bitwise equal to the CPU's: {same}")
    print(f"time: openreg {time_o:.2f} s, CPU {time_c:.2f} s, ratio {time_o / time_c:.1f}x")
    stats = o.memory_stats(0)
    print(f"memory on openreg:0: peak allocated {o.max_memory_allocated(0) / 2**20:.2f} MiB, reserved "
          f"{o.memory_reserved(0) / 2**20:.2f} MiB, device allocations during training "
          f"{stats['num_device_alloc'] - allocs_before}")
    total = sum(paths[k] for k in ("native", "async", "sync", "copying"))
    print(f"operator calls: {total} ({', '.join(f'{k} {paths[k]}' for k in ('native', 'async', 'sync', 'copying'))}); "
          f"bytes copied by the fallback: {paths['copied_bytes']}")
    if not same:
        raise SystemExit("openreg and CPU results differ")


if __name__ == "__main__":
    main()
