"""DeepSpeed ZeRO on 2 ranks, as a user writes it; `eco_deepspeed.py` runs it on openreg and on the
CPU and compares. Usage: deepspeed_train.py OUT DEVICE STAGE (DEVICE openreg or cpu; STAGE 1, 2, 3).

Each rank is a spawned process on the loopback interface (rank r on openreg:r for openreg, with
OpenRegAccelerator set before DeepSpeed starts; DeepSpeed's own CPU accelerator and Gloo for the
CPU). A small transformer trains for 6 steps with AdamW under ZeRO; inside every step the rank
records the device of its batch, of its loss and of its parameters. OUT gets rank 0's full
parameters (gathered under ZeRO-3) and every rank's losses (OUT.rank1 for rank 1)."""

import os
import sys

import torch
import torch.multiprocessing as mp
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from distributed_harness import free_port, loopback_env

STEPS = 6


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 32),
        nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True),
        nn.Linear(32, 1),
    )


def _rank(rank: int, out: str, device: str, stage: int, port: int) -> None:
    os.environ.update(loopback_env(port, 2, rank))
    import deepspeed
    from deepspeed.accelerator import get_accelerator, set_accelerator

    if device == "openreg":
        from torch_openreg.deepspeed import OpenRegAccelerator

        set_accelerator(OpenRegAccelerator())
    accelerator = get_accelerator()
    assert accelerator.device_name() == device, accelerator.device_name()
    if device == "openreg":
        accelerator.set_device(rank)
    deepspeed.init_distributed()  # the accelerator's backend: occl on openreg, Gloo on the CPU
    model = _model()
    config = {
        "train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000,
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    generator = torch.Generator().manual_seed(10 + rank)  # each rank its own batches
    losses, seen = [], []
    for _ in range(STEPS):
        x = torch.randn(4, 6, 8, generator=generator).to(engine.device)
        y = torch.randn(4, generator=generator).to(engine.device)
        loss = nn.functional.mse_loss(engine(x).squeeze(-1).mean(-1), y)
        engine.backward(loss)
        engine.step()
        seen.append((x.device.type, loss.device.type, {p.device.type for p in engine.module.parameters()} == {device}))
        losses.append(loss.detach())
    result = {"losses": torch.stack(losses).cpu(), "seen": seen, "engine_device": str(engine.device)}
    with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=stage == 3):
        params = {name: p.detach().cpu().clone() for name, p in engine.module.named_parameters()}
    if rank == 0:
        result["params"] = params
    torch.save(result, out if rank == 0 else f"{out}.rank{rank}")
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


def main() -> None:
    out, device, stage = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mp.start_processes(_rank, args=(out, device, stage, free_port()), nprocs=2, start_method="spawn")


if __name__ == "__main__":
    main()
