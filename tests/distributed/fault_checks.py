"""Faults, each in its own 2-rank run (dist_faults.py): a rank that dies, and collectives whose
ranks disagree on shapes or dtypes. The survivors must raise a clear error within the group's
timeout (GROUP_TIMEOUT seconds), never hang. The mismatches run with TORCH_DISTRIBUTED_DEBUG=DETAIL,
PyTorch's collective checking: without it Gloo's transport aborts the process on a size mismatch
(as it does for CPU tensors) and cannot see a dtype mismatch of the same size."""

import os
import time

import pytest
import torch
import torch.distributed as dist

GROUP_TIMEOUT = 10
MISMATCH = r"Detected mismatch between collectives on ranks.*"


def dev(rank):
    return torch.device("openreg", rank)


def check_a_dead_rank_makes_the_survivor_raise(rank, ws):
    dist.barrier()
    if rank == 1:
        os._exit(3)  # dies without a word
    time.sleep(1.0)
    t = torch.ones(1000, device=dev(rank))
    start = time.monotonic()
    # Two outcomes, both documented (docs/distributed.md, Ordering with streams): Gloo may see the
    # closed connection before wait(), which then raises at once; otherwise wait() only makes the
    # stream wait, and the failure is the stream's, raised by its next synchronization.
    def reduce_and_synchronize():
        dist.all_reduce(t)
        torch.openreg.synchronize()

    with pytest.raises(RuntimeError, match=r"occl all_reduce on openreg:0 failed: .*"):
        reduce_and_synchronize()
    elapsed = time.monotonic() - start
    assert elapsed < GROUP_TIMEOUT + 5, f"raised after {elapsed:.1f} s"
    # the device itself stays usable
    assert torch.equal((t + 1).cpu(), torch.full((1000,), 2.0))


def check_a_rank_that_stops_makes_the_other_time_out(rank, ws):
    dist.barrier()
    if rank == 1:
        time.sleep(GROUP_TIMEOUT + 8)  # alive, but never joins the collective
        return
    t = torch.ones(1000, device=dev(rank))
    start = time.monotonic()
    dist.all_reduce(t)  # returns at once: the stream waits (Note [Collective ordering])
    with pytest.raises(RuntimeError, match=r"occl all_reduce on openreg:0 failed: .*[Tt]imed out"):
        torch.openreg.synchronize()
    elapsed = time.monotonic() - start
    assert GROUP_TIMEOUT - 1 < elapsed < GROUP_TIMEOUT + 5, f"raised after {elapsed:.1f} s"


def check_mismatched_sizes_raise(rank, ws):
    t = torch.ones(4 + rank, device=dev(rank))
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=MISMATCH + r"Tensor Tensor shapes: [45]vs [45]"):
        dist.all_reduce(t)
    assert time.monotonic() - start < GROUP_TIMEOUT + 5


def check_mismatched_dtypes_raise(rank, ws):
    t = torch.ones(8, device=dev(rank), dtype=torch.float32 if rank == 0 else torch.int32)  # same size
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=MISMATCH + r"Tensor Tensor dtypes: (Floatvs Int|Intvs Float)"):
        dist.all_reduce(t)
    assert time.monotonic() - start < GROUP_TIMEOUT + 5
