"""Lightning's Trainer on openreg (torch_openreg.lightning) against the same Trainer on the CPU:
one device in float32 and mixed precision, DDP on 2 processes against DDP on Gloo, the device
statistics monitor, and the error that replaces Lightning's silent fall-back to the CPU."""

import csv
import pathlib

import pytest
import torch
from ecosystem_runs import assert_same_tensors, run_script


def _train(tmp_path: pathlib.Path, name: str, *args: str) -> dict:
    out = str(tmp_path / f"{name}.pt")
    run_script("lightning_train.py", out, *args)
    return torch.load(out)


def _assert_in_loop(run: dict, device: str, autocast: bool, dtype: str) -> None:
    """Every training step saw its batch and parameters on `device`, autocast as expected."""
    assert len(run["seen"]) == len(run["losses"]) > 0
    assert set(run["seen"]) == {(device, device, autocast, dtype)}


# precision on openreg, the CPU's run it must equal, the dtype of the model's output under it.
# Lightning turns 16-mixed into bf16-mixed on the CPU, so the CPU's float16 run is the same Trainer
# with Lightning's MixedPrecision plugin for the CPU (float16 autocast, GradScaler("cpu")).
SINGLE_DEVICE_RUNS = [
    ("32-true", "32-true", "torch.float32"),
    ("bf16-mixed", "bf16-mixed", "torch.bfloat16"),
    ("16-mixed", "cpu-16-mixed", "torch.float16"),
]


@pytest.mark.parametrize("precision, cpu_precision, dtype", SINGLE_DEVICE_RUNS)
def test_single_device_equals_the_cpu(tmp_path, precision, cpu_precision, dtype):
    openreg = _train(tmp_path, "openreg", "openreg", "1", "openreg_single", precision)
    cpu = _train(tmp_path, "cpu", "cpu", "1", "auto", cpu_precision)
    assert openreg["strategy"] == "SingleOpenRegStrategy" and cpu["strategy"] == "SingleDeviceStrategy"
    mixed = precision.endswith("-mixed")
    assert openreg["precision"] == ("OpenRegPrecision" if mixed else "Precision")
    _assert_in_loop(openreg, "openreg", mixed, dtype)
    _assert_in_loop(cpu, "cpu", mixed, dtype)
    assert torch.equal(openreg["losses"], cpu["losses"])
    assert_same_tensors(openreg["params"], cpu["params"])


def test_ddp_on_two_processes_equals_ddp_on_gloo(tmp_path):
    openreg = _train(tmp_path, "openreg", "openreg", "2", "openreg_ddp", "32-true")
    cpu = _train(tmp_path, "cpu", "cpu", "2", "ddp", "32-true")
    assert openreg["strategy"] == "OpenRegDDPStrategy" and openreg["world_size"] == 2 == cpu["world_size"]
    for rank in (0, 1):
        suffix = "" if rank == 0 else ".rank1"
        on_openreg = openreg if rank == 0 else torch.load(tmp_path / f"openreg.pt{suffix}")
        on_cpu = cpu if rank == 0 else torch.load(tmp_path / f"cpu.pt{suffix}")
        _assert_in_loop(on_openreg, "openreg", False, "torch.float32")
        assert torch.equal(on_openreg["losses"], on_cpu["losses"]), rank
    # The two ranks drew different batches: DistributedSampler split the data.
    assert not torch.equal(openreg["losses"], torch.load(tmp_path / "openreg.pt.rank1")["losses"])
    assert_same_tensors(openreg["params"], cpu["params"])


def test_device_stats_monitor_logs_the_allocator_statistics(tmp_path):
    _train(tmp_path, "openreg", "openreg", "1", "openreg_single", "32-true", "monitor")
    (metrics,) = (tmp_path / "openreg.pt.logs").rglob("metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    column = "DeviceStatsMonitor.on_train_batch_end/allocated_bytes.all.current"
    values = [int(float(row[column])) for row in rows if row.get(column)]
    assert len(values) >= 10 and min(values) > 0


@pytest.mark.parametrize(
    "devices, strategy, message",
    [
        ("1", "auto", "Lightning chooses SingleDeviceStrategy"),  # instead of training on the CPU
        ("2", "auto", "cannot run Lightning's DDPStrategy"),  # instead of failing in torch.cuda
        ("2", "ddp", "cannot run Lightning's DDPStrategy"),
    ],
)
def test_lightnings_own_strategies_raise_with_the_recipe(tmp_path, devices, strategy, message):
    with pytest.raises(AssertionError, match=message):
        _train(tmp_path, "openreg", "openreg", devices, strategy, "32-true")
