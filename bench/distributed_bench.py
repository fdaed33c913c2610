"""torch.distributed on openreg (occl) against PyTorch's Gloo on CPU tensors, 2 ranks on this host.

All-reduce (SUM, float32) bus bandwidth for messages from 1 KiB to 256 MiB: in each repeat both
ranks run `iters` all-reduces of an openreg tensor (through occl) and of a CPU tensor of the same
size (through Gloo) in one "cpu:gloo,openreg:occl" group, alternating the two so a noisy
neighbour hits both alike; each figure is the median of the repeats, taken on rank 0. Bus
bandwidth = bytes * 2 * (n - 1) / n / time (NCCL's definition for all-reduce). A Gloo call on CPU
tensors returns when its result is there; an occl call returns once the current stream waits for
it, so each openreg repeat ends with a device synchronization.

Then one DDP training step (forward, backward with its gradient all-reduces, SGD) of an MLP, on
openreg and on the CPU, and the same step without DDP on one device, so that the DDP ratio can be
read against the single-device ratio of the execution engine.

    python bench/distributed_bench.py [out.json]
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn

SIZES = [1 << k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB
REPEATS = 5


def iterations(nbytes: int) -> int:
    return max(2, min(200, (64 << 20) // max(nbytes, 1) // 4))


def timed_all_reduce(t: torch.Tensor, iters: int) -> float:
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    if t.device.type == "openreg":
        # Work.wait() orders the current stream after the collective and returns at once, as
        # NCCL's does: the collectives are complete when the stream is.
        torch.openreg.synchronize(t.device)
    return (time.perf_counter() - start) / iters


def bench_all_reduce(rank: int, world: int) -> list[dict]:
    rows = []
    for nbytes in SIZES:
        n = nbytes // 4
        cpu = torch.ones(n)
        dev = torch.ones(n, device=torch.device("openreg", rank))
        iters = iterations(nbytes)
        dist.all_reduce(cpu)
        dist.all_reduce(dev)  # warm-up: connections, allocator
        times = {"openreg": [], "cpu": []}
        for _ in range(REPEATS):
            dist.barrier()
            times["openreg"].append(timed_all_reduce(dev, iters))
            dist.barrier()
            times["cpu"].append(timed_all_reduce(cpu, iters))
        row = {"bytes": nbytes, "iters": iters}
        for k, v in times.items():
            t = statistics.median(v)
            row[f"{k}_us"] = t * 1e6
            row[f"{k}_busbw_GBps"] = nbytes * 2 * (world - 1) / world / t / 1e9
        row["ratio_busbw"] = row["openreg_busbw_GBps"] / row["cpu_busbw_GBps"]
        rows.append(row)
        if rank == 0:
            print(
                f"{nbytes:>10d} B  openreg {row['openreg_busbw_GBps']:8.3f} GB/s  cpu {row['cpu_busbw_GBps']:8.3f} GB/s"
                f"  openreg/cpu {row['ratio_busbw']:.2f}",
                flush=True,
            )
    return rows


def mlp(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(512, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10)).to(
        device
    )


def step_time(device, ddp: bool, rank: int, steps: int = 20) -> float:
    model = mlp(device)
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(64, 512, generator=torch.Generator().manual_seed(rank)).to(device)
    y = torch.randint(0, 10, (64,), generator=torch.Generator().manual_seed(rank)).to(device)

    def step():
        opt.zero_grad()
        F.cross_entropy(net(x), y).backward()
        opt.step()

    for _ in range(3):
        step()
    if device.type == "openreg":
        torch.openreg.synchronize()
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        if device.type == "openreg":
            torch.openreg.synchronize()
        samples.append((time.perf_counter() - start) / steps)
    return statistics.median(samples)


def bench_ddp(rank: int) -> dict:
    dev = torch.device("openreg", rank)
    cpu = torch.device("cpu")
    out = {
        "ddp_openreg_ms": step_time(dev, True, rank) * 1e3,
        "ddp_cpu_ms": step_time(cpu, True, rank) * 1e3,
        "single_openreg_ms": step_time(dev, False, rank) * 1e3,
        "single_cpu_ms": step_time(cpu, False, rank) * 1e3,
    }
    out["ddp_ratio"] = out["ddp_openreg_ms"] / out["ddp_cpu_ms"]
    out["single_ratio"] = out["single_openreg_ms"] / out["single_cpu_ms"]
    if rank == 0:
        print(
            f"DDP step: openreg {out['ddp_openreg_ms']:.2f} ms, cpu {out['ddp_cpu_ms']:.2f} ms, "
            f"openreg/cpu {out['ddp_ratio']:.2f}; without DDP on one device: openreg/cpu {out['single_ratio']:.2f}",
            flush=True,
        )
    return out


def rank_main(rank: int, world: int, port: int, out_path: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
    torch.openreg.set_device(rank)
    dist.init_process_group("cpu:gloo,openreg:occl", rank=rank, world_size=world)
    result = {"world_size": world, "all_reduce": bench_all_reduce(rank, world), "ddp": bench_ddp(rank)}
    if rank == 0:
        result["load_average"] = os.getloadavg()
        with open(out_path, "w") as f:
            json.dump(result, f, indent=1)
        print(f"load average {result['load_average']}; written to {out_path}")
    gc.collect()  # before the group goes: docs/distributed.md, "Exit"
    dist.destroy_process_group()


def main() -> None:
    import socket

    out_path = sys.argv[1] if len(sys.argv) > 1 else "bench/results/distributed.json"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    print(f"load average before: {os.getloadavg()}")
    mp.spawn(rank_main, args=(2, port, out_path), nprocs=2)


if __name__ == "__main__":
    main()
