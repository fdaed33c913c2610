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


def test_single_device_float32_equals_the_cpu(tmp_path):
    openreg = _train(tmp_path, "openreg", "openreg", "1", "openreg_single", "32-true")
    cpu = _train(tmp_path, "cpu", "cpu", "1", "auto", "32-true")
    assert openreg["strategy"] == "SingleOpenRegStrategy" and cpu["strategy"] == "SingleDeviceStrategy"
    _assert_in_loop(openreg, "openreg", False, "torch.float32")
    _assert_in_loop(cpu, "cpu", False, "torch.float32")
    assert torch.equal(openreg["losses"], cpu["losses"])
    assert_same_tensors(openreg["params"], cpu["params"])


def test_bf16_mixed_autocasts_on_openreg_and_equals_the_cpu(tmp_path):
    openreg = _train(tmp_path, "openreg", "openreg", "1", "openreg_single", "bf16-mixed")
    cpu = _train(tmp_path, "cpu", "cpu", "1", "auto", "bf16-mixed")
    assert openreg["precision"] == "OpenRegPrecision"
    _assert_in_loop(openreg, "openreg", True, "torch.bfloat16")
    _assert_in_loop(cpu, "cpu", True, "torch.bfloat16")
    assert torch.equal(openreg["losses"], cpu["losses"])
    assert_same_tensors(openreg["params"], cpu["params"])


def test_16_mixed_scales_gradients_on_openreg(tmp_path):
    # Lightning turns 16-mixed into bf16-mixed on the CPU, so the CPU's float16 run is the same
    # Trainer with its own MixedPrecision plugin for the CPU (float16 autocast, GradScaler("cpu")).
    openreg = _train(tmp_path, "openreg", "openreg", "1", "openreg_single", "16-mixed")
    cpu = _train(tmp_path, "cpu", "cpu", "1", "auto", "cpu-16-mixed")
    assert openreg["precision"] == "OpenRegPrecision"
    _assert_in_loop(openreg, "openreg", True, "torch.float16")
    _assert_in_loop(cpu, "cpu", True, "torch.float16")
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


def test_accelerator_without_an_openreg_strategy_raises_instead_of_training_on_the_cpu(tmp_path):
    with pytest.raises(AssertionError, match="Lightning chooses SingleDeviceStrategy"):
        _train(tmp_path, "openreg", "openreg", "1", "auto", "32-true")
