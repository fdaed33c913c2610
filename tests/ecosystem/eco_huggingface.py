"""transformers' Trainer and accelerate's Accelerator on openreg, selected through accelerate's
variables, against the same runs on the CPU; from_pretrained(device_map=...) onto openreg; resuming
from a checkpoint; safetensors' loading onto the device (docs/ecosystem.md)."""

import json
import pathlib

import pytest
import torch
from distributed_harness import free_port
from ecosystem_runs import assert_same_tensors, run_script

ON_OPENREG = {"ACCELERATE_TORCH_DEVICE": "openreg"}


def _run(tmp_path: pathlib.Path, name: str, case: str, *args: str, env: dict | None = None) -> dict:
    out = str(tmp_path / f"{name}.pt")
    run_script("hf_train.py", case, out, *args, env=env)
    return torch.load(out)


def test_trainer_without_the_variable_trains_on_the_cpu(tmp_path):
    run = _run(tmp_path, "default", "trainer", "fp32")
    assert run["device"] == "cpu" and {seen[:2] for seen in run["seen"]} == {("cpu", "cpu")}


def test_trainer_float32_on_openreg_equals_the_cpu(tmp_path):
    openreg = _run(tmp_path, "openreg", "trainer", "fp32", env=ON_OPENREG)
    cpu = _run(tmp_path, "cpu", "trainer", "fp32")
    assert openreg["device"] == "openreg"
    assert len(openreg["seen"]) == 8 and set(openreg["seen"]) == {("openreg", "openreg", False)}
    assert openreg["losses"] == cpu["losses"]
    assert_same_tensors(openreg["params"], cpu["params"])


def test_trainer_bf16_through_accelerates_variable_autocasts_on_openreg(tmp_path):
    # TrainingArguments(bf16=True) refuses every device but CUDA's and a few others; accelerate's
    # ACCELERATE_MIXED_PRECISION=bf16 reaches the same Accelerator(mixed_precision="bf16").
    env = {**ON_OPENREG, "ACCELERATE_MIXED_PRECISION": "bf16"}
    openreg = _run(tmp_path, "openreg", "trainer", "fp32", env=env)
    cpu = _run(tmp_path, "cpu", "trainer", "fp32", env={"ACCELERATE_MIXED_PRECISION": "bf16"})
    fp32 = _run(tmp_path, "fp32", "trainer", "fp32", env=ON_OPENREG)
    assert set(openreg["seen"]) == {("openreg", "openreg", True)}
    assert set(cpu["seen"]) == {("cpu", "cpu", True)}
    # GPT-2's layer_norm and softmax run in float32 under openreg's autocast (CUDA's policy) and in
    # bfloat16 under the CPU's (docs/amp.md): close to the CPU's bf16 losses, not bitwise.
    assert openreg["losses"] == pytest.approx(cpu["losses"], rel=2e-2)
    assert openreg["losses"] != fp32["losses"]


def test_trainer_bf16_argument_is_refused_by_transformers(tmp_path):
    with pytest.raises(AssertionError, match="Your setup doesn't support bf16/gpu"):
        _run(tmp_path, "openreg", "trainer", "bf16", env=ON_OPENREG)


def test_resume_with_the_rng_callback_equals_training_straight_through(tmp_path):
    openreg = _run(tmp_path, "openreg", "resume", "callback", env=ON_OPENREG)
    assert openreg["device"] == "openreg" and set(openreg["seen"]) == {("openreg", "openreg", False)}
    assert len(openreg["seen"]) == 4  # the steps after the checkpoint
    assert_same_tensors(openreg["params"], openreg["straight"])
    cpu = _run(tmp_path, "cpu", "resume", "none")  # Trainer restores the CPU's generator itself
    assert_same_tensors(cpu["params"], cpu["straight"])


def test_resume_without_the_rng_callback_draws_other_dropout_masks(tmp_path):
    # Trainer saves and restores CUDA's generators and a few others', not openreg's (docs/ecosystem.md).
    openreg = _run(tmp_path, "openreg", "resume", "none", env=ON_OPENREG)
    assert any(not torch.equal(openreg["params"][name], openreg["straight"][name]) for name in openreg["params"])


def test_accelerator_loop_on_openreg_equals_the_cpu(tmp_path):
    openreg = _run(tmp_path, "openreg", "accelerate", "no", env=ON_OPENREG)
    cpu = _run(tmp_path, "cpu", "accelerate", "no")
    assert openreg["device"] == "openreg" and cpu["device"] == "cpu"
    assert len(openreg["seen"]) == 8 and set(openreg["seen"]) == {("openreg", "openreg", False)}
    assert torch.equal(openreg["losses"], cpu["losses"])
    assert_same_tensors(openreg["params"], cpu["params"])


def test_accelerator_fp16_is_refused_by_accelerate(tmp_path):
    with pytest.raises(AssertionError, match="fp16 mixed precision requires a device in"):
        _run(tmp_path, "openreg", "accelerate", "fp16", env=ON_OPENREG)


def test_accelerator_bf16_loop_autocasts_on_openreg(tmp_path):
    openreg = _run(tmp_path, "openreg", "accelerate", "bf16", env=ON_OPENREG)
    cpu = _run(tmp_path, "cpu", "accelerate", "bf16")
    assert set(openreg["seen"]) == {("openreg", "openreg", True)}
    assert openreg["losses"].tolist() == pytest.approx(cpu["losses"].tolist(), rel=2e-2)


@pytest.mark.parametrize("device_map, devices", [("openreg", ["openreg:0"]), ("openreg:1", ["openreg:1"])])
def test_from_pretrained_with_a_device_map_loads_onto_openreg(tmp_path, device_map, devices):
    openreg = _run(tmp_path, "openreg", "pretrained", device_map)
    cpu = _run(tmp_path, "cpu", "pretrained", "cpu")
    assert openreg["devices"] == devices and cpu["devices"] == ["cpu"]
    assert_same_tensors(openreg["params"], cpu["params"])
    assert torch.equal(openreg["logits"], cpu["logits"])


def test_accelerate_under_torchrun_on_openreg_sees_no_distributed_run(tmp_path):
    # accelerate's _prepare_backend knows no collective backend for a PrivateUse1 device: each of the
    # two processes believes it is alone (docs/ecosystem.md), so neither DDP nor sharding happens.
    out = str(tmp_path / "state")
    run_script(
        "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
        "--master-port", str(free_port()), "accelerate_ranks.py", out, env=ON_OPENREG,
    )
    states = [json.loads(pathlib.Path(f"{out}.rank{rank}").read_text()) for rank in (0, 1)]
    assert states == [{"type": "DistributedType.NO", "processes": 1, "device": "openreg"}] * 2


def test_safetensors_loads_onto_openreg_by_index_but_refuses_the_device_name(tmp_path):
    from safetensors import SafetensorError
    from safetensors.torch import load_file, save_file

    tensors = {"weight": torch.randn(3, 5), "step": torch.arange(4)}
    save_file(tensors, tmp_path / "t.safetensors")
    loaded = load_file(tmp_path / "t.safetensors", device=1)  # an index is the current accelerator's
    assert {t.device for t in loaded.values()} == {torch.device("openreg", 1)}
    assert_same_tensors({name: t.cpu() for name, t in loaded.items()}, tensors)
    with pytest.raises(SafetensorError, match="device openreg is invalid"):
        load_file(tmp_path / "t.safetensors", device="openreg")
