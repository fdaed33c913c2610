"""Checks run inside 2 spawned ranks (tests/distributed_harness.py), rank r on openreg:r.

The group is "cpu:gloo,openreg:occl": a collective on CPU tensors goes through PyTorch's own Gloo
backend and is the oracle; the same collective on openreg copies of the same tensors goes through
occl, and the two results must be bitwise equal. Each check is `check_*(rank, world_size)` and
raises AssertionError naming what differs.
"""

import json
import os
import tempfile
import time

import pytest
import torch
import torch.distributed as dist
from torch.profiler import ProfilerActivity, profile

OPS = {
    torch.float32: [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN, dist.ReduceOp.MAX],
    torch.float64: [dist.ReduceOp.SUM, dist.ReduceOp.MAX],
    torch.int64: [dist.ReduceOp.SUM, dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR],
}


def dev(rank):
    return torch.device("openreg", rank)


def data(rank, *shape, dtype=torch.float32, salt=0):
    g = torch.Generator().manual_seed(1000 * rank + salt)
    if dtype.is_floating_point:
        return torch.randn(*shape, generator=g, dtype=dtype)
    return torch.randint(-1000, 1000, shape, generator=g, dtype=dtype)


def same(openreg_t, cpu_t, rank, what):
    assert openreg_t.device == dev(rank), f"{what}: result on {openreg_t.device}, expected {dev(rank)}"
    got = openreg_t.cpu()
    assert got.dtype == cpu_t.dtype and got.shape == cpu_t.shape, f"{what}: {got.dtype}{list(got.shape)}"
    assert torch.equal(got, cpu_t), f"{what}: openreg {got} != cpu gloo {cpu_t}"


def check_all_reduce_every_op(rank, ws):
    for dtype, ops in OPS.items():
        for op in ops:
            c = data(rank, 33, 5, dtype=dtype)
            o = c.to(dev(rank))
            dist.all_reduce(c, op=op)
            dist.all_reduce(o, op=op)
            same(o, c, rank, f"all_reduce {op} {dtype}")


def check_all_reduce_avg(rank, ws):
    for dtype in (torch.float32, torch.int64):
        c = data(rank, 100, dtype=dtype)
        o = c.to(dev(rank))
        dist.all_reduce(c)  # Gloo has no AVG: the CPU oracle sums and divides
        c = c.div(ws) if dtype.is_floating_point else c.div(ws, rounding_mode="trunc")
        dist.all_reduce(o, op=dist.ReduceOp.AVG)
        same(o, c, rank, f"all_reduce AVG {dtype}")


def check_broadcast_and_reduce(rank, ws):
    for src in range(ws):
        c = data(rank, 7, 3)
        o = c.to(dev(rank))
        dist.broadcast(c, src=src)
        dist.broadcast(o, src=src)
        same(o, c, rank, f"broadcast from {src}")
    c = data(rank, 64)
    o = c.to(dev(rank))
    dist.reduce(c, dst=1, op=dist.ReduceOp.MAX)
    dist.reduce(o, dst=1, op=dist.ReduceOp.MAX)
    same(o, c, rank, "reduce MAX to rank 1")


def check_all_gather_forms(rank, ws):
    c = data(rank, 4, 3)
    o = c.to(dev(rank))
    cl = [torch.empty_like(c) for _ in range(ws)]
    ol = [torch.empty_like(o) for _ in range(ws)]
    dist.all_gather(cl, c)
    dist.all_gather(ol, o)
    for i in range(ws):
        same(ol[i], cl[i], rank, f"all_gather [{i}]")
    ct = torch.empty(ws * 4, 3)
    ot = torch.empty(ws * 4, 3, device=dev(rank))
    dist.all_gather_into_tensor(ct, c)
    dist.all_gather_into_tensor(ot, o)
    same(ot, ct, rank, "all_gather_into_tensor")
    cobj, oobj = [None] * ws, [None] * ws
    dist.all_gather_object(cobj, {"rank": rank})
    assert cobj == [{"rank": r} for r in range(ws)], f"all_gather_object {cobj}"
    del oobj


def check_reduce_scatter_forms(rank, ws):
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.MAX):
        c = data(rank, ws * 6, 2)
        o = c.to(dev(rank))
        cout = torch.empty(6, 2)
        oout = torch.empty(6, 2, device=dev(rank))
        dist.reduce_scatter_tensor(cout, c, op=op)
        dist.reduce_scatter_tensor(oout, o, op=op)
        same(oout, cout, rank, f"reduce_scatter_tensor {op}")
    c = data(rank, ws * 6)
    o = c.to(dev(rank))
    cout, oout = torch.empty(6), torch.empty(6, device=dev(rank))
    dist.reduce_scatter_tensor(cout, c)
    dist.reduce_scatter_tensor(oout, o, op=dist.ReduceOp.AVG)
    same(oout, cout.div(ws), rank, "reduce_scatter_tensor AVG")
    cl = [data(rank, 5, salt=i) for i in range(ws)]
    ol = [t.to(dev(rank)) for t in cl]
    cout, oout = torch.empty(5), torch.empty(5, device=dev(rank))
    dist.reduce_scatter(cout, cl)
    dist.reduce_scatter(oout, ol)
    same(oout, cout, rank, "reduce_scatter (list)")


def check_all_to_all_forms(rank, ws):
    c = data(rank, ws * 3, 2)
    o = c.to(dev(rank))
    cout, oout = torch.empty_like(c), torch.empty_like(o)
    dist.all_to_all_single(cout, c)
    dist.all_to_all_single(oout, o)
    same(oout, cout, rank, "all_to_all_single even")
    # uneven: rank r sends r+1+j rows to rank j
    in_splits = [rank + 1 + j for j in range(ws)]
    out_splits = [r + 1 + rank for r in range(ws)]
    c = data(rank, sum(in_splits), 2)
    o = c.to(dev(rank))
    cout = torch.empty(sum(out_splits), 2)
    oout = torch.empty(sum(out_splits), 2, device=dev(rank))
    dist.all_to_all_single(cout, c, out_splits, in_splits)
    dist.all_to_all_single(oout, o, out_splits, in_splits)
    same(oout, cout, rank, "all_to_all_single uneven")
    cl = [data(rank, 3, salt=j) for j in range(ws)]
    ol = [t.to(dev(rank)) for t in cl]
    cout = [torch.empty(3) for _ in range(ws)]
    oout = [torch.empty(3, device=dev(rank)) for _ in range(ws)]
    dist.all_to_all(cout, cl)
    dist.all_to_all(oout, ol)
    for j in range(ws):
        same(oout[j], cout[j], rank, f"all_to_all [{j}]")


def check_gather_scatter(rank, ws):
    c = data(rank, 6)
    o = c.to(dev(rank))
    cl = [torch.empty(6) for _ in range(ws)] if rank == 0 else None
    ol = [torch.empty(6, device=dev(rank)) for _ in range(ws)] if rank == 0 else None
    dist.gather(c, cl, dst=0)
    dist.gather(o, ol, dst=0)
    if rank == 0:
        for i in range(ws):
            same(ol[i], cl[i], rank, f"gather [{i}]")
    src_c = [data(1, 4, salt=i) for i in range(ws)] if rank == 1 else None
    src_o = [t.to(dev(rank)) for t in src_c] if rank == 1 else None
    cout, oout = torch.empty(4), torch.empty(4, device=dev(rank))
    dist.scatter(cout, src_c, src=1)
    dist.scatter(oout, src_o, src=1)
    same(oout, cout, rank, "scatter from 1")


def check_collectives_under_inference_mode(rank, ws):
    # vLLM gathers under torch.inference_mode(): the tensors are inference tensors, and Gloo writes
    # occl's aliases of them on its own threads, where inference mode is off. The same checks as
    # above, each against Gloo on CPU tensors.
    with torch.inference_mode():
        check_all_gather_forms(rank, ws)
        check_gather_scatter(rank, ws)
        check_all_reduce_avg(rank, ws)


def check_point_to_point(rank, ws):
    peer = 1 - rank
    c = data(rank, 10) if rank == 0 else torch.empty(10)
    o = c.to(dev(rank))
    if rank == 0:
        dist.send(c, 1)
        dist.send(o, 1)
    else:
        dist.recv(c, 0)
        dist.recv(o, 0)
        same(o, c, rank, "send/recv")
    # isend/irecv both ways at once, then batch_isend_irecv
    mine = data(rank, 8).to(dev(rank))
    theirs = torch.empty(8, device=dev(rank))
    works = [dist.isend(mine, peer), dist.irecv(theirs, peer)]
    for w in works:
        w.wait()
    same(theirs, data(peer, 8), rank, "isend/irecv")
    theirs2 = torch.empty(8, device=dev(rank))
    ops = [dist.P2POp(dist.isend, mine * 2, peer), dist.P2POp(dist.irecv, theirs2, peer)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(theirs2, data(peer, 8) * 2, rank, "batch_isend_irecv")


def check_coalesced_forms(rank, ws):
    cs = [data(rank, 5, salt=1), data(rank, 3, 2, salt=2)]
    os_ = [t.to(dev(rank)) for t in cs]
    dist.all_reduce_coalesced(cs)
    dist.all_reduce_coalesced(os_)
    for i in range(2):
        same(os_[i], cs[i], rank, f"all_reduce_coalesced [{i}]")
    with dist._coalescing_manager(device=dev(rank)):
        outs = [torch.empty(ws * 4, device=dev(rank)) for _ in range(2)]
        for i in range(2):
            dist.all_gather_into_tensor(outs[i], data(rank, 4, salt=i).to(dev(rank)))
    for i in range(2):
        expected = torch.cat([data(r, 4, salt=i) for r in range(ws)])
        same(outs[i], expected, rank, f"coalesced all_gather_into_tensor [{i}]")


def check_barrier_and_async_work(rank, ws):
    dist.barrier()
    o = data(rank, 16).to(dev(rank))
    expected = sum(data(r, 16) for r in range(ws))
    work = dist.all_reduce(o, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: f.value()[0] * 2)
    assert work.wait() is True, "Work.wait() returns True"
    value = fut.wait()
    assert isinstance(value, list) and len(value) == 1, f"future value {value!r}"
    assert value[0].data_ptr() == o.data_ptr(), "the future's value is the output tensor itself"
    same(value[0], expected, rank, "async all_reduce future value")
    same(chained.wait(), expected * 2, rank, "future.then")
    assert work.is_completed() and work.is_success(), "completed, successfully"
    same(work.result()[0], expected, rank, "Work.result()")


def check_stream_ordering(rank, ws):
    # The input is written by stream work queued behind a sleep: the collective must start after
    # it; the multiply queued after wait() must see the collective's result.
    o = torch.zeros(1000, device=dev(rank))
    torch.openreg._sleep(300)
    o.add_(rank + 1)
    dist.all_reduce(o)
    o.mul_(2)
    expected = torch.full((1000,), float(sum(r + 1 for r in range(ws)) * 2))
    same(o, expected, rank, "collective ordered with the current stream")
    # The same on a side stream: the gate is that stream's, not the default stream's.
    side = torch.openreg.Stream(device=rank)
    with torch.openreg.stream(side):
        p = torch.zeros(1000, device=dev(rank))
        torch.openreg._sleep(200)
        p.add_(rank + 1)
        work = dist.all_reduce(p, async_op=True)
        work.wait()
        p.mul_(3)
    side.synchronize()
    same(p, torch.full((1000,), float(sum(r + 1 for r in range(ws)) * 3)), rank, "on a side stream")


def check_wait_orders_the_stream_not_the_host(rank, ws):
    # Rank 1 joins late, so rank 0's collective is still running when its wait() returns: the
    # current stream waits for it (Note [Collective ordering]), the host does not.
    o = data(rank, 64).to(dev(rank))
    expected = sum(data(r, 64) for r in range(ws))
    dist.barrier()
    if rank == 1:
        time.sleep(0.5)
    work = dist.all_reduce(o, async_op=True)
    assert work.wait() is True, "Work.wait() returns True"
    if rank == 0:
        assert not work.is_completed(), "wait() returned before the collective completed"
        assert not torch.openreg.current_stream().query(), "the stream waits for the collective"
    o.mul_(2)
    same(o, expected * 2, rank, "work queued after wait() runs after the collective")
    assert work.is_completed() and work.is_success(), "completed once the stream passed the wait"
    work.synchronize()  # stream-ordered too; returns at once
    o.add_(1)
    same(o, expected * 2 + 1, rank, "after synchronize()")


def check_collective_is_on_the_profilers_stream_row(rank, ws):
    # Note [Host-timed activity]: the collective is an entry on the row of the stream it is ordered
    # with, linked to the operator that launched it, and the work waiting for it comes after it.
    o = data(rank, 256).to(dev(rank))
    expected = sum(data(r, 256) for r in range(ws))
    torch.openreg.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
        dist.all_reduce(o)
        o.mul_(2)
        torch.openreg.synchronize()
    same(o, expected * 2, rank, "profiled all_reduce")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    [row] = [e for e in events if e.get("ph") == "X" and e.get("name") == "occl all_reduce"]
    assert row["cat"] == "kernel" and row["pid"] == rank, f"row {row}"
    launcher = min(
        (e for e in events if e.get("cat") == "cpu_op" and e["name"] == "c10d::allreduce_"), key=lambda e: e["ts"]
    )
    assert row["args"]["External id"] == launcher["args"]["External id"], "linked to c10d::allreduce_"
    [mul] = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel" and e["name"] == "aten::mul_ kernel"]
    assert mul["tid"] == row["tid"], "on the stream the collective is ordered with"
    assert mul["ts"] >= row["ts"] + row["dur"] - 1, "the work after wait() starts after the collective"


def check_new_group_and_split_group(rank, ws):
    g = dist.new_group([0, 1])
    o = data(rank, 9).to(dev(rank))
    dist.all_reduce(o, group=g)
    same(o, sum(data(r, 9) for r in range(ws)), rank, "all_reduce on new_group")
    solo = dist.new_group([rank], use_local_synchronization=True)
    p = data(rank, 4).to(dev(rank))
    dist.all_reduce(p, group=solo)
    same(p, data(rank, 4), rank, "all_reduce on a group of one")
    s = dist.split_group(split_ranks=[[0], [1]])
    assert s is not None and s.size() == 1, f"split_group gave {s}"
    assert s._get_backend(dev(rank)).name() == "occl", "the split keeps occl"
    q = data(rank, 4).to(dev(rank))
    dist.all_reduce(q, group=s)
    same(q, data(rank, 4), rank, "all_reduce on split_group")


def check_ddp_bitwise_equal_to_cpu(rank, ws):
    from torch.nn.parallel import DistributedDataParallel as DDP

    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)).to(device)
        ddp = DDP(model, bucket_cap_mb=0.0005)  # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        for step in range(3):
            x, y = data(rank, 8, 12, salt=step).to(device), data(rank, 8, 3, salt=50 + step).to(device)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        return [p.detach() for p in model.parameters()]

    for i, (o, c) in enumerate(zip(train(dev(rank)), train("cpu"), strict=True)):
        same(o, c, rank, f"DDP parameter {i} after 3 steps")


def check_dtensor_random_operators_draw_the_cpus_numbers(rank, ws):
    # Note [DTensor's random numbers on openreg]: FSDP2's initialization after sharding
    # (meta-device module, to_empty, reset_parameters) draws on each rank what the CPU mesh's rank
    # draws from the same seed, bitwise; it raised AssertionError in DTensor's Philox tracker.
    import warnings

    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    def initialize(device):
        mesh = init_device_mesh(torch.device(device).type, (ws,))
        with torch.device("meta"):
            model = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Linear(24, 8))
        fully_shard(model, mesh=mesh)
        model.to_empty(device=device)
        torch.manual_seed(100 + rank)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # DTensor's, and ours: each rank draws on its own
            for layer in model:
                layer.reset_parameters()
        assert all(isinstance(p, DTensor) for p in model.parameters())
        return [p.to_local().detach() for p in model.parameters()]

    for i, (o, c) in enumerate(zip(initialize(dev(rank)), initialize("cpu"), strict=True)):
        same(o, c, rank, f"shard {i} after initialization")


def check_mixed_devices_raise(rank, ws):
    backend = dist.group.WORLD._get_backend(dev(rank))
    assert backend.name() == "occl", backend.name()
    with pytest.raises(RuntimeError, match=rf"occl all_reduce: a tensor is on cpu .* openreg:{rank}"):
        backend.allreduce([torch.ones(2, device=dev(rank)), torch.ones(2)])
    with pytest.raises(RuntimeError, match="occl all_reduce: a tensor is on meta"):
        backend.allreduce([torch.ones(2, device="meta")])
    with pytest.raises(RuntimeError, match="PREMUL_SUM is not supported"):
        dist.all_reduce(torch.ones(2, device=dev(rank)), op=dist._make_nccl_premul_sum(2.0))
    dist.barrier()
