"""Sharing openreg tensors between processes (docs/ipc.md): torch.multiprocessing with spawn.

One spawned child does every check that needs another process, stepped through two queues, so the
default suite starts one interpreter; `make test-ipc` runs the longer multi-process checks
(tests/ipc_long.py). Every get() has a timeout: a failure here is an error, never a hang."""

import gc
import multiprocessing.queues
import re
from queue import Empty

import pytest
import torch
import torch.multiprocessing as mp

TIMEOUT = 120


def _child(inbox, outbox):
    """The other process: receives, checks, writes, sends back, and lets go when told."""
    x, y, view = inbox.get(timeout=TIMEOUT)
    x_again = inbox.get(timeout=TIMEOUT)  # another message: another handle, the same block
    x_again.record_stream(torch.openreg.Stream())  # freeing it synchronizes: nothing to record
    report = {
        "devices": [str(t.device) for t in (x, y, view)],
        "x": x.cpu().tolist(),
        "y": y.cpu().tolist(),
        "view": view.cpu().tolist(),
        # One StorageImpl, as torch's shared_cache gives for CUDA.
        "same_storage": x.untyped_storage()._cdata == x_again.untyped_storage()._cdata,
        "view_aliases_x": view.data_ptr() == x.data_ptr() + 10 * x.element_size(),
    }
    x[0:4] = -1.0  # written in this process, read by the parent
    torch.openreg.synchronize()
    own = torch.arange(6, dtype=torch.float64).to("openreg:1") * 3  # memory of this process
    outbox.put((report, own))

    assert inbox.get(timeout=TIMEOUT) == "parent wrote"
    outbox.put(x[4:8].cpu().tolist())
    # Memory received from another process cannot be passed on: put() raises here, in the
    # caller's thread; deeper inside an object it goes through the feeder thread, and the
    # receiver's get() raises instead of waiting.
    try:
        outbox.put(x)
        outbox.put("put did not raise")
    except RuntimeError as error:
        outbox.put(str(error))
    outbox.put([[[x]]])

    assert inbox.get(timeout=TIMEOUT) == "let go"
    del x, y, view, x_again
    gc.collect()
    outbox.put("released")
    assert inbox.get(timeout=TIMEOUT) == "exit"


@pytest.fixture(scope="module")
def child():
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=_child, args=(inbox, outbox), daemon=True)
    process.start()
    yield inbox, outbox, process
    inbox.put("exit")
    process.join(timeout=TIMEOUT)
    assert process.exitcode == 0


def test_a_spawned_child_shares_openreg_memory_both_ways_and_holds_it(child):
    inbox, outbox, _ = child
    x_cpu = torch.arange(64, dtype=torch.float32)
    x = x_cpu.to("openreg")
    y = torch.full((3, 5), 2.5, device="openreg:1")
    view = x[10:20]
    inbox.put((x, y, view))
    inbox.put(x)
    x.record_stream(torch.openreg.Stream())  # still the allocator's block after it was sent

    report, own = outbox.get(timeout=TIMEOUT)
    # The same values on the same devices, one storage for the tensor sent twice, views alias.
    assert report["devices"] == ["openreg:0", "openreg:1", "openreg:0"]
    assert report["x"] == x_cpu.tolist()
    assert report["y"] == [[2.5] * 5] * 3
    assert report["view"] == x_cpu[10:20].tolist()
    assert report["same_storage"] and report["view_aliases_x"]
    # The child's write, after it synchronized, is in this process's tensor: the same memory.
    expected = x_cpu.clone()
    expected[0:4] = -1.0
    assert torch.equal(x.cpu(), expected)
    # Memory the child allocated arrives too.
    assert own.device == torch.device("openreg:1") and own.dtype == torch.float64
    assert torch.equal(own.cpu(), torch.arange(6, dtype=torch.float64) * 3)

    x[4:8] = 7.0
    torch.openreg.synchronize()
    inbox.put("parent wrote")
    assert outbox.get(timeout=TIMEOUT) == [7.0] * 4
    assert re.search("cannot share a 256-byte storage on openreg:0 .* shared by process",
                     outbox.get(timeout=TIMEOUT))
    with pytest.raises(RuntimeError, match=r"cannot share .* shared by process"):
        outbox.get(timeout=TIMEOUT)

    # Dropped here while the child holds it: the block is not reused.
    address = x.untyped_storage().data_ptr()
    nbytes = x.untyped_storage().nbytes()
    del x, view
    gc.collect()
    assert torch.openreg.ipc_collect() >= 1
    fresh = [torch.empty(nbytes // 4, device="openreg") for _ in range(8)]
    assert address not in [t.data_ptr() for t in fresh]
    del fresh

    inbox.put("let go")
    assert outbox.get(timeout=TIMEOUT) == "released"
    assert torch.openreg.ipc_collect() == 0


def _exit_at_once():
    pass


def test_a_queue_of_the_fork_method_refuses_openreg_tensors_at_put_after_a_fork():
    x = torch.ones(4, device="openreg")
    context = mp.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=_exit_at_once)  # a fork after initialization
    process.start()
    process.join(timeout=TIMEOUT)
    with pytest.raises(RuntimeError, match="'fork' start method after openreg was initialized"):
        queue.put((1, [x]))
    with pytest.raises(RuntimeError, match="'fork' start method after openreg was initialized"):
        context.JoinableQueue().put({"x": x})
    queue.put(torch.ones(4))  # CPU tensors are untouched
    assert torch.equal(queue.get(timeout=TIMEOUT), torch.ones(4))


def test_a_failing_share_raises_at_put_and_python_still_needs_the_patch(capfd):
    # Python's own put pickles in the feeder thread: an object that cannot be pickled is dropped
    # there and put returns. Once this fails, Python raises at put itself and the patch can go.
    queue = mp.get_context("spawn").Queue()
    multiprocessing.queues.Queue.put._openreg_original(queue, lambda: None)
    with pytest.raises(Empty):
        queue.get(timeout=1)
    assert "pickle" in capfd.readouterr().err
    # A storage whose last write failed cannot be shared: the failure raises from put.
    x = torch.zeros(8, device="openreg")
    x.index_fill_(0, torch.tensor([50], device="openreg"), 1.0)  # fails on the device
    with pytest.raises(RuntimeError, match=r"cannot share a 32-byte storage on openreg:0 .*index"):
        queue.put(x)
    queue.close()
    queue.join_thread()


class OpenRegRows(torch.utils.data.Dataset):
    """Rows made on the device by the worker that loads them."""

    def __len__(self):
        return 4

    def __getitem__(self, index):
        return torch.full((3,), float(index), device="openreg")


def test_dataloader_workers_forked_after_initialization_refuse_openreg_as_cuda_does():
    torch.ones(1, device="openreg")
    loader = iter(torch.utils.data.DataLoader(OpenRegRows(), batch_size=2, num_workers=1))
    with pytest.raises(RuntimeError, match="Cannot re-initialize OpenReg in forked subprocess"):
        next(loader)
    del loader  # shuts the worker down here (the DataLoader waits up to 5 s for it)
    gc.collect()


def test_share_memory_leaves_an_openreg_tensor_shareable_as_it_is():
    x = torch.arange(4.0).to("openreg")
    address = x.data_ptr()
    assert x.share_memory_() is x
    assert x.is_shared()
    assert x.data_ptr() == address and torch.equal(x.cpu(), torch.arange(4.0))


def _forked_receiver(inbox, outbox, inherited):
    try:
        inbox.get(timeout=TIMEOUT)
        outbox.put("received")
    except RuntimeError as error:
        outbox.put(str(error))
    try:
        outbox.put(inherited)  # the parent's tensor, inherited through fork: cannot be shared
        outbox.put("put did not raise")
    except RuntimeError as error:
        outbox.put(str(error))


def test_a_child_forked_after_initialization_raises_at_get_as_cuda_children_do():
    spawn_queues = mp.get_context("spawn")
    inbox, outbox = spawn_queues.Queue(), spawn_queues.Queue()  # not refused at put
    x = torch.ones(4, device="openreg")
    child = mp.get_context("fork").Process(target=_forked_receiver, args=(inbox, outbox, x))
    child.start()
    inbox.put(x)
    assert "Cannot re-initialize OpenReg in forked subprocess" in outbox.get(timeout=TIMEOUT)
    assert re.search("cannot share .* forked subprocess", outbox.get(timeout=TIMEOUT))
    child.join(timeout=TIMEOUT)
    assert child.exitcode == 0
