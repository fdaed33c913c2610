"""Training steps of the libraries in docs/ecosystem.md, openreg against the CPU in one process
(`make bench-ecosystem`, in .venv-ecosystem/): Lightning's Trainer, transformers' Trainer and
accelerate's loop, each run with the models of tests/ecosystem/ (whose equality with the CPU
`make test-ecosystem` checks). The runs alternate between the devices, REPEATS times; a step's time
is measured with the device's queue drained at its end, the first WARMUP steps of a run left out.
A run's figure is the median of its steps, and the table gives each device's fastest run: on a
machine shared with other jobs, whole runs get slowed by seconds of contention, and the least
disturbed run is the one that measures the library and the device. Usage: ecosystem_bench.py [JSON].
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "ecosystem"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

REPEATS = 10
WARMUP = 3
STEPS = 15


def _drain(device: torch.device) -> None:
    if device.type == "openreg":
        torch.openreg.synchronize(device)


def lightning_steps(device: str, precision: str = "32-true") -> list[float]:
    import lightning.pytorch as pl
    from lightning_train import Regressor

    import torch_openreg.lightning  # noqa: F401

    class Timer(pl.Callback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_train_batch_start(self, trainer, module, batch, batch_index):
            self.start = time.perf_counter()

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_index):
            _drain(module.device)
            self.times.append(time.perf_counter() - self.start)

    timer = Timer()
    trainer = pl.Trainer(
        accelerator=device, devices=1, strategy="openreg_single" if device == "openreg" else "auto",
        precision=precision, max_steps=STEPS, logger=False, callbacks=[timer], enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(Regressor(mixed=precision.endswith("-mixed")))
    return timer.times[WARMUP:]


def hf_trainer_steps(device: str, mixed_precision: str = "no") -> list[float]:
    import transformers
    from hf_train import _arguments, _dataset, _model

    class Timer(transformers.TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, model=None, **kwargs):
            _drain(next(model.parameters()).device)
            self.times.append(time.perf_counter() - self.start)

    os.environ["ACCELERATE_TORCH_DEVICE"] = device  # read when TrainingArguments sets up its device
    os.environ["ACCELERATE_MIXED_PRECISION"] = mixed_precision  # read by TrainingArguments
    timer = Timer()
    args = _arguments("build/bench-ecosystem", max_steps=STEPS, use_cpu=device == "cpu")
    assert args.device.type == device
    data = _dataset() * 2  # STEPS batches of 4
    transformers.Trainer(model=_model(), args=args, train_dataset=data, callbacks=[timer]).train()
    return timer.times[WARMUP:]


def accelerate_steps(device: str) -> list[float]:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState
    from hf_train import _dataset, _model

    AcceleratorState._reset_state(reset_partial_state=True)  # a new device for a new Accelerator
    os.environ["ACCELERATE_TORCH_DEVICE"] = device
    accelerator = Accelerator(cpu=device == "cpu")
    assert accelerator.device.type == device
    model = _model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = torch.utils.data.DataLoader(_dataset() * 2, batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    times = []
    for batch in loader:
        start = time.perf_counter()
        accelerator.backward(model(**batch).loss)
        optimizer.step()
        optimizer.zero_grad()
        _drain(accelerator.device)
        times.append(time.perf_counter() - start)
    return times[WARMUP:]


CASES = {
    "Lightning Trainer, 1 device, fp32 (transformer encoder layer)": lightning_steps,
    "Lightning Trainer, 1 device, bf16-mixed (MLP)": lambda device: lightning_steps(device, "bf16-mixed"),
    "transformers Trainer, fp32 (GPT-2, 2 layers)": hf_trainer_steps,
    "transformers Trainer, bf16 (GPT-2, 2 layers)": lambda device: hf_trainer_steps(device, "bf16"),
    "accelerate Accelerator loop, fp32 (GPT-2, 2 layers)": accelerate_steps,
}


def main() -> None:
    results = {}
    print(f"{'case':<66}{'openreg ms':>12}{'cpu ms':>10}{'ratio':>8}")
    for name, run in CASES.items():
        runs = {"openreg": [], "cpu": []}
        for _ in range(REPEATS):
            for device in ("openreg", "cpu"):
                runs[device].append(statistics.median(run(device)))
        openreg, cpu = min(runs["openreg"]), min(runs["cpu"])
        results[name] = {"openreg_s": openreg, "cpu_s": cpu, "ratio": openreg / cpu, "runs": runs}
        print(f"{name:<66}{openreg * 1e3:>12.2f}{cpu * 1e3:>10.2f}{openreg / cpu:>8.2f}", flush=True)
    if len(sys.argv) > 1:
        Path(sys.argv[1]).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
