"""FSDP2, a DTensor tensor-parallel LM, DeviceMesh and distributed checkpoints on occl, 2 ranks
spawned once (training_checks.py)."""

import pytest
import training_checks
from distributed_harness import run_ranks

CHECKS = sorted(name for name in dir(training_checks) if name.startswith("check_"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_ranks("training_checks", CHECKS, tmp_path_factory.mktemp("ranks"), backend="cpu:gloo,openreg:occl")


@pytest.mark.parametrize("check", CHECKS)
def test_training(two_ranks, check):
    for rank, outcome in enumerate(two_ranks[check]):
        assert outcome == "ok", f"rank {rank}, {check}:\n{outcome}"
