"""torch.distributed on openreg: the occl backend (docs/distributed.md).

One spawn of 2 ranks on 127.0.0.1 (tests/distributed_harness.py) runs every check of
tests/distributed_checks.py; each test below asserts one check's outcome on both ranks, so the
ranks start once for the whole file. Results are compared bitwise with PyTorch's Gloo on CPU
tensors in the same processes. Longer runs (FSDP2, DTensor, checkpoints, faults, torchrun) are in
tests/distributed/ (`make test-distributed`).
"""

import os

import distributed_checks
import pytest
import torch.distributed as dist
from distributed_harness import run_ranks

CHECKS = sorted(name for name in dir(distributed_checks) if name.startswith("check_"))


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    return run_ranks("distributed_checks", CHECKS, tmp_path_factory.mktemp("ranks"), backend="cpu:gloo,openreg:occl")


@pytest.mark.parametrize("check", CHECKS)
def test_two_ranks(two_ranks, check):
    for rank, outcome in enumerate(two_ranks[check]):
        assert outcome == "ok", f"rank {rank}, {check}:\n{outcome}"


def test_occl_is_registered_for_openreg_and_cpu_and_default_for_openreg():
    assert "occl" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["openreg"] == "occl"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo", "the CPU keeps Gloo"
    assert dist.Backend.backend_capability["occl"] == ["openreg", "cpu"]
    assert dist.Backend.backend_type_map["occl"] == dist.ProcessGroup.BackendType.CUSTOM


def test_set_device_initializes_the_device_module(tmp_path):
    from conftest import run_python

    result = run_python(
        """
        import torch
        print(torch.openreg.is_initialized())
        torch.openreg.set_device(1)
        print(torch.openreg.is_initialized(), torch.openreg.current_device())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "1"]


def test_default_backend_type_is_custom_with_the_patch_before_2_14_and_without_it_from_2_14():
    """Note [Default backend type]: torch < 2.14 gives a group made with no backend the GLOO default
    type, which DDP cannot find, and our patch sets CUSTOM; torch 2.14 sets CUSTOM itself, and the
    patch is not applied. When this fails on an old release, PyTorch changed its mind."""
    from conftest import run_python
    from torch_openreg._compat import torch_before

    code = """
        import torch, torch.distributed as dist, torch.distributed.distributed_c10d as c10d
        current = c10d._new_process_group_helper
        helpers = [getattr(current, "__wrapped_original__", None), current]
        print(helpers[0] is not None)
        for helper in filter(None, helpers):
            c10d._new_process_group_helper = helper
            dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
            print(dist.group.WORLD._get_backend_name())
            try:
                torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2).to("openreg"))
                print("ddp-ok")
            except RuntimeError as e:
                print("ddp-failed" if "Could not find backend type" in str(e) else repr(e))
            dist.destroy_process_group()
    """
    result = run_python(code, env={"GLOO_SOCKET_IFNAME": "lo"})
    assert result.returncode == 0, result.stderr
    applied, *outcomes = result.stdout.split()
    if torch_before(2, 14):
        assert applied == "True"
        unpatched, patched = outcomes[:2], outcomes[2:]
        assert unpatched == ["gloo", "ddp-failed"], f"PyTorch fixed it ({unpatched}): end the patch's gate here"
        assert patched == ["custom", "ddp-ok"]
    else:
        assert applied == "False", "the patch is applied on a release that does not need it"
        assert outcomes == ["custom", "ddp-ok"], outcomes


def test_dtensors_offset_tracker_still_refuses_openregs_generator():
    """Note [DTensor's random numbers on openreg]: with DTensor's own is_rng_supported_mesh, a random
    operator on a sharded openreg DTensor fails in its Philox offset tracker. When this test fails,
    the tracker takes openreg's generator and torch_openreg/_dtensor_random.py should go."""
    from conftest import run_python

    result = run_python(
        """
        import torch, torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import distribute_tensor, Shard, _random, _dispatch
        from torch_openreg import _dtensor_random as ours
        assert _dispatch.is_rng_supported_mesh is _random.is_rng_supported_mesh is ours._is_rng_supported_mesh
        _random.is_rng_supported_mesh = _dispatch.is_rng_supported_mesh = ours.original_is_rng_supported_mesh()
        torch.openreg.set_device(0)
        dist.init_process_group("occl", store=dist.HashStore(), rank=0, world_size=1)
        sharded = distribute_tensor(torch.zeros(8, device="openreg"), init_device_mesh("openreg", (1,)), [Shard(0)])
        try:
            sharded.normal_()
            print("works")
        except AssertionError:
            print("AssertionError")
        dist.destroy_process_group()
        """,
        env={"GLOO_SOCKET_IFNAME": "lo"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["AssertionError"]


def test_a_group_destroyed_right_after_a_collective_ends_every_time(tmp_path):
    """Note [Destroyed without the GIL]: a rank destroying its group right after an all-reduce hung
    in 2 of 3 runs on 2.14.1 (joining Gloo's thread with the GIL held while that thread waited for
    it), and the other rank's next init_process_group then timed out. Ten cycles on two ranks."""
    import subprocess
    import sys
    import textwrap

    script = tmp_path / "ranks.py"  # spawned ranks import their function from a file
    script.write_text(textwrap.dedent(f"""
        import datetime, torch, torch.distributed as dist, torch.multiprocessing as mp

        def rank_main(rank):
            for cycle in range(10):
                dist.init_process_group("occl", init_method="file://{tmp_path}/init" + str(cycle),
                                        rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
                t = torch.full((4,), float(rank + 1), device="openreg")
                dist.all_reduce(t)
                assert t.cpu().tolist() == [3.0] * 4
                dist.destroy_process_group()

        if __name__ == "__main__":
            mp.spawn(rank_main, nprocs=2, join=True)
            print("done")
    """))
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo")
    result = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True,
                            timeout=240)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["done"]
