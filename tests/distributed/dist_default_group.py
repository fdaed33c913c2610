"""init_process_group() with no backend, 2 ranks: occl alone serves the group, DDP trains
(default_group_checks.py)."""

import default_group_checks
import pytest
from distributed_harness import run_ranks

CHECKS = sorted(name for name in dir(default_group_checks) if name.startswith("check_"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_ranks("default_group_checks", CHECKS, tmp_path_factory.mktemp("ranks"), backend="")


@pytest.mark.parametrize("check", CHECKS)
def test_default_group(two_ranks, check):
    for rank, outcome in enumerate(two_ranks[check]):
        assert outcome == "ok", f"rank {rank}, {check}:\n{outcome}"
