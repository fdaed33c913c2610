"""Checks in a group made by init_process_group() with no backend (dist_default_group.py):
openreg's default backend, occl, is the group's only one."""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def dev(rank):
    return torch.device("openreg", rank)


def batch(seed, *shape):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def check_the_group_is_occl(rank, ws):
    assert dist.group.WORLD._get_backend(dev(rank)).name() == "occl"
    assert dist.group.WORLD._get_backend_name() == "custom", "Note [Default backend type]"
    t = torch.full((4,), float(rank + 1), device=dev(rank))
    dist.all_reduce(t)
    assert t.cpu().tolist() == [3.0] * 4, t


def check_ddp_matches_single_device_training_on_the_whole_batch(rank, ws):
    def model():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))

    ddp = DistributedDataParallel(model().to(dev(rank)))
    ref = model()
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    for step in range(3):
        xs = [batch(10 * step + r, 4, 8) for r in range(ws)]
        ys = [batch(10 * step + r + 5, 4, 2) for r in range(ws)]
        opt.zero_grad()
        F.mse_loss(ddp(xs[rank].to(dev(rank))), ys[rank].to(dev(rank))).backward()
        opt.step()
        ref_opt.zero_grad()
        F.mse_loss(ref(torch.cat(xs)), torch.cat(ys)).backward()
        ref_opt.step()
    for p, q in zip(ddp.parameters(), ref.parameters(), strict=True):
        assert torch.allclose(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6), (p, q)
        replicas = [torch.empty_like(p) for _ in range(ws)]
        dist.all_gather(replicas, p.detach())
        assert all(torch.equal(r.cpu(), replicas[0].cpu()) for r in replicas), "replicas differ"
