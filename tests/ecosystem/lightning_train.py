"""One Lightning training run, as a user writes it; `eco_lightning.py` runs it on openreg and on the
CPU and compares. Usage: lightning_train.py OUT ACCELERATOR DEVICES STRATEGY PRECISION [MONITOR].

The module records, inside every training step, the device of its batch and parameters and
whether autocast is on for that device; the run saves (rank 0 the parameters, every rank its
losses) to OUT (OUT.rank1 for rank 1)."""

import sys

import lightning.pytorch as pl
import torch
from torch import nn

import torch_openreg.lightning  # noqa: F401  (registers accelerator="openreg" and its strategies)

STEPS = 12


class Regressor(pl.LightningModule):
    """A small transformer encoder (with dropout) in float32. Under mixed precision an MLP (linear,
    relu, float32 mse_loss), whose operators CPU autocast and openreg's (CUDA's policy) cast alike
    (docs/amp.md), so that the CPU's mixed-precision run is the oracle; no dropout there: F.dropout
    takes another algorithm on the CPU than on accelerators, equal in float32 but not in the
    last bit of bfloat16 gradients (docs/ecosystem.md)."""

    def __init__(self, mixed: bool) -> None:
        super().__init__()
        if mixed:
            self.body = nn.Sequential(
                nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 1)
            )
        else:
            self.body = nn.Sequential(
                nn.Linear(8, 32),
                nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.1, batch_first=True),
                nn.Linear(32, 1),
            )
        self.losses: list[torch.Tensor] = []
        self.seen: list[tuple[str, str, bool, str]] = []

    def on_train_start(self) -> None:
        # The device's generator is not the CPU's (as with CUDA): the CPU's has drawn the initial
        # weights. Seeding both here makes dropout draw the same numbers on openreg and on the CPU.
        torch.manual_seed(1)

    def training_step(self, batch, batch_index):
        x, y = batch
        prediction = self.body(x).squeeze(-1)
        device = next(self.parameters()).device
        self.seen.append(
            (x.device.type, device.type, torch.is_autocast_enabled(device.type), str(prediction.dtype))
        )
        loss = nn.functional.mse_loss(prediction.float().mean(-1), y)
        self.losses.append(loss.detach())
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

    def train_dataloader(self):
        generator = torch.Generator().manual_seed(3)
        data = torch.utils.data.TensorDataset(
            torch.randn(192, 6, 8, generator=generator), torch.randn(192, generator=generator)
        )
        return torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(4))


def main() -> None:
    out, accelerator, devices, strategy, precision = sys.argv[1:6]
    monitor = len(sys.argv) > 6 and sys.argv[6] == "monitor"
    pl.seed_everything(0, verbose=False)
    model = Regressor(mixed=precision.endswith("-mixed"))
    callbacks = []
    logger = False
    if monitor:
        callbacks.append(pl.callbacks.DeviceStatsMonitor())
        logger = pl.loggers.CSVLogger(out + ".logs", name="run")
    plugins = None
    if precision == "cpu-16-mixed":  # float16 autocast on the CPU, which precision="16-mixed" turns into bf16
        precision, plugins = None, [pl.plugins.MixedPrecision("16-mixed", "cpu")]
    trainer = pl.Trainer(
        accelerator=accelerator,
        devices=int(devices),
        strategy=strategy,
        precision=precision,
        plugins=plugins,
        max_steps=STEPS,
        logger=logger,
        log_every_n_steps=1,
        callbacks=callbacks,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model)
    result = {
        "losses": torch.stack(model.losses).cpu(),
        "seen": model.seen,
        "strategy": type(trainer.strategy).__name__,
        "precision": type(trainer.precision_plugin).__name__,
        "world_size": trainer.world_size,
    }
    if trainer.global_rank == 0:
        result["params"] = {name: p.detach().cpu() for name, p in model.named_parameters()}
    torch.save(result, out if trainer.global_rank == 0 else f"{out}.rank{trainer.global_rank}")


if __name__ == "__main__":
    main()
