"""Faults on occl, one 2-rank run each (fault_checks.py): a dead rank, mismatched shapes and
dtypes. Every run ends within its deadline: a hang fails the test instead of stalling it."""

from distributed_harness import run_ranks
from fault_checks import GROUP_TIMEOUT

DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}  # PyTorch's collective checking


def run(name, tmp_path, env=None):
    return run_ranks(
        "fault_checks",
        [name],
        tmp_path,
        backend="cpu:gloo,openreg:occl",
        timeout=GROUP_TIMEOUT * 6,
        group_timeout=GROUP_TIMEOUT,
        env=env,
        hard_exit=True,
    )[name]


def test_a_dead_rank_makes_the_survivor_raise_within_the_timeout(tmp_path):
    survivor, dead = run("check_a_dead_rank_makes_the_survivor_raise", tmp_path)
    assert survivor == "ok", survivor
    assert "exit codes [0, 3]" in dead, dead  # rank 1 died as planned; rank 0 ended normally


def test_a_rank_that_stops_makes_the_other_time_out_after_the_group_timeout(tmp_path):
    waiting, stopped = run("check_a_rank_that_stops_makes_the_other_time_out", tmp_path)
    assert waiting == "ok", waiting
    assert stopped == "ok", stopped


def test_mismatched_shapes_raise_on_every_rank(tmp_path):
    for rank, outcome in enumerate(run("check_mismatched_sizes_raise", tmp_path, DETAIL)):
        assert outcome == "ok", f"rank {rank}:\n{outcome}"


def test_mismatched_dtypes_raise_on_every_rank(tmp_path):
    for rank, outcome in enumerate(run("check_mismatched_dtypes_raise", tmp_path, DETAIL)):
        assert outcome == "ok", f"rank {rank}:\n{outcome}"
