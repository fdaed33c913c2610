"""Data-parallel training on openreg devices with DistributedDataParallel over the occl backend.

Launch with torchrun, one process per device (rank r on openreg:LOCAL_RANK):

    torchrun --nproc-per-node 2 examples/train_ddp.py
    # two "machines" on this host, through Gloo's TCP transport and c10d rendezvous:
    torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d --rdzv-endpoint 127.0.0.1:29400 \
        --rdzv-id demo examples/train_ddp.py      # run this in two shells

Each rank trains on its shard of a synthetic classification set (DistributedSampler); DDP averages
the gradients with occl. Then the same training runs again on the CPU with DDP over PyTorch's Gloo
in the same processes, and rank 0 prints whether every parameter ended bitwise equal, and the time
per step of each. The exit status is 1 if they differ. See docs/distributed.md.
"""

import argparse
import gc
import os
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def dataset(samples=2048, features=32, classes=8):
    g = torch.Generator().manual_seed(0)
    centers = torch.randn(classes, features, generator=g) * 2
    labels = torch.randint(0, classes, (samples,), generator=g)
    return TensorDataset(centers[labels] + torch.randn(samples, features, generator=g), labels)


def model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 128), nn.ReLU(), nn.Linear(128, 8))


def train(device, data, steps, batch_size):
    net = DistributedDataParallel(model().to(device))
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    sampler = DistributedSampler(data, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=batch_size, sampler=sampler, drop_last=True)
    step, epoch, losses = 0, 0, []
    start = time.perf_counter()
    while step < steps:
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(net(x.to(device)), y.to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.detach())
            step += 1
            if step == steps:
                break
        epoch += 1
    params = [p.detach().cpu() for p in net.parameters()]  # waits for the device
    return params, [float(v) for v in losses], (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.openreg.set_device(local_rank)
    dist.init_process_group("cpu:gloo,openreg:occl")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = dataset()

    device = torch.device("openreg", local_rank)
    device_params, device_losses, device_step = train(device, data, args.steps, args.batch_size)
    cpu_params, cpu_losses, cpu_step = train(torch.device("cpu"), data, args.steps, args.batch_size)
    equal = all(torch.equal(a, b) for a, b in zip(device_params, cpu_params, strict=True))
    equal_t = torch.tensor([int(equal)])
    dist.all_reduce(equal_t, op=dist.ReduceOp.MIN)  # every rank's parameters, not only rank 0's
    if rank == 0:
        print(f"world size {world}, {args.steps} steps of batch {args.batch_size} per rank")
        print(f"loss: first {device_losses[0]:.4f}, last {device_losses[-1]:.4f} (cpu: last {cpu_losses[-1]:.4f})")
        print(f"losses bitwise equal to CPU DDP: {device_losses == cpu_losses}")
        print(f"parameters bitwise equal to CPU DDP on every rank: {bool(equal_t.item())}")
        print(f"time per step: openreg {device_step * 1e3:.2f} ms, cpu {cpu_step * 1e3:.2f} ms")
    # DDP's modules live in reference cycles that keep the group, and Gloo's threads, alive past
    # destroy_process_group unless collected first; a Gloo thread that drops a tensor while the
    # interpreter finalizes aborts the process (docs/distributed.md, "Exit").
    gc.collect()
    dist.destroy_process_group()
    raise SystemExit(0 if equal_t.item() else 1)


if __name__ == "__main__":
    main()
