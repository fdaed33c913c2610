"""Training checks run in 2 spawned ranks (rank r on openreg:r) by dist_training.py: FSDP2,
a DTensor tensor-parallel transformer LM and torch.distributed.checkpoint, each against the same
model trained unsharded on one device (the CPU, whose results openreg's equal bitwise)."""

import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

STEPS = 4


def dev(rank):
    return torch.device("openreg", rank)


def batch(seed, *shape, vocab=None):
    g = torch.Generator().manual_seed(seed)
    if vocab is not None:
        return torch.randint(0, vocab, shape, generator=g)
    return torch.randn(*shape, generator=g)


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        b, t, _ = x.shape
        h = self.norm1(x)
        # -1 heads: under tensor parallelism each rank holds heads / world_size of them
        q, k, v = (p(h).view(b, t, -1, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, -1))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TinyLM(nn.Module):
    def __init__(self, vocab=64, dim=32, heads=4, layers=2, seq=16):
        super().__init__()
        self.embed, self.pos = nn.Embedding(vocab, dim), nn.Embedding(seq, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(model, tokens):
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def close(a, b, what, rtol=1e-5, atol=1e-6):
    assert torch.allclose(a, b, rtol=rtol, atol=atol), f"{what}: {a} vs {b} (max diff {(a - b).abs().max()})"


def check_device_mesh_and_init_device_mesh(rank, ws):
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

    mesh = init_device_mesh("openreg", (ws,))
    assert mesh.device_type == "openreg" and mesh.size() == ws, str(mesh)
    assert torch.openreg.current_device() == rank, "the mesh kept the device the program set"
    t = torch.full((3,), float(rank + 1), device=dev(rank))
    dist.all_reduce(t, group=mesh.get_group())
    assert t.cpu().tolist() == [3.0] * 3, t
    mesh2 = DeviceMesh("openreg", list(range(ws)))
    assert mesh2.get_group()._get_backend(dev(rank)).name() == "occl"


def check_fsdp2_matches_single_device(rank, ws):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("openreg", (ws,))
    model = mlp().to(dev(rank))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    ref = mlp()
    ref_opt = torch.optim.Adam(ref.parameters(), lr=1e-2)
    for step in range(STEPS):
        xs = [batch(100 * step + r, 8, 16) for r in range(ws)]
        ys = [batch(100 * step + r + 50, 8, 4) for r in range(ws)]
        loss = F.mse_loss(model(xs[rank].to(dev(rank))), ys[rank].to(dev(rank)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the unsharded run sees the whole global batch: the mean of the ranks' mean losses
        ref_loss = F.mse_loss(ref(torch.cat(xs)), torch.cat(ys))
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss, op=dist.ReduceOp.AVG)
        close(global_loss.cpu(), ref_loss.detach(), f"FSDP2 loss at step {step}")
    for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
        close(p.full_tensor().cpu(), q.detach(), f"FSDP2 parameter {name}", rtol=1e-4, atol=1e-5)


def check_dtensor_tensor_parallel_lm_matches_single_device(rank, ws):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("openreg", (ws,))
    torch.manual_seed(0)
    model = TinyLM().to(dev(rank))
    torch.manual_seed(0)
    ref = TinyLM()
    plan = {}
    for i in range(len(model.blocks)):
        for name in ("q", "k", "v", "fc1"):
            plan[f"blocks.{i}.{name}"] = ColwiseParallel()
        for name in ("o", "fc2"):
            plan[f"blocks.{i}.{name}"] = RowwiseParallel()
    parallelize_module(model, mesh, plan)
    # foreach=False: the plan leaves embeddings and norms plain tensors, and a foreach kernel
    # refuses a list mixing them with DTensors (as on any device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    losses = []
    for step in range(STEPS):
        tokens = batch(step, 4, 17, vocab=64)  # the same batch on every rank
        loss = lm_loss(model, tokens.to(dev(rank)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        ref_loss = lm_loss(ref, tokens)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_opt.step()
        close(loss.detach().cpu(), ref_loss.detach(), f"tensor-parallel LM loss at step {step}")
        losses.append(ref_loss.item())
    assert losses[-1] < losses[0], f"the LM learns: {losses}"
    q0 = model.blocks[0].q.weight
    assert q0.placements[0].is_shard(0) and q0.to_local().shape[0] == 32 // ws, "q is column-sharded"


def check_checkpoint_saves_and_loads_sharded_state(rank, ws):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    path = os.path.join(os.environ["OPENREG_TEST_SHARED_DIR"], "checkpoint")
    mesh = init_device_mesh("openreg", (ws,))
    model = fully_shard(mlp().to(dev(rank)), mesh=mesh)
    with torch.no_grad():
        for p in model.parameters():
            p.to_local().add_(rank + 1)  # each rank's shard changes differently
    saved = {k: v.full_tensor().cpu() for k, v in get_model_state_dict(model).items()}
    dcp.save(get_model_state_dict(model), checkpoint_id=path)
    fresh = fully_shard(mlp().to(dev(rank)), mesh=mesh)
    state = get_model_state_dict(fresh)
    dcp.load(state, checkpoint_id=path)
    set_model_state_dict(fresh, state)
    for k, v in get_model_state_dict(fresh).items():
        assert v.device.type == "openreg", f"{k} loaded on {v.device}"
        assert torch.equal(v.full_tensor().cpu(), saved[k]), f"{k} differs after load"
    initial = mlp().state_dict()
    assert any(not torch.equal(saved[k], initial[k]) for k in saved), "the saved state is not the initial one"
