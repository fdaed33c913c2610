"""The longer multi-process checks of sharing openreg memory (docs/ipc.md), run by `make test-ipc`
(not collected by the default suite: several spawned interpreters, tens of seconds).

Each case starts its own spawned processes; every get() and join() has a timeout."""

import gc
import os
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

TIMEOUT = 120


def _producer(queue, results, done):
    base = torch.arange(0.0, 64.0, device="openreg:0")
    other = torch.arange(10, dtype=torch.int64, device="openreg:1") * 7
    queue.put((base, base[4:12], base[::4], other))
    assert done.wait(timeout=TIMEOUT)
    # The consumer wrote into base and synchronized before setting done.
    results.put(base[0:3].cpu().tolist())
    del base, other
    gc.collect()
    results.put(torch.openreg.ipc_collect())


def _consumer(queue, results, done):
    base, offset, strided, other = queue.get(timeout=TIMEOUT)
    results.put(
        {
            "offset": (offset.cpu().tolist(), offset.storage_offset(), list(offset.stride())),
            "strided": (strided.cpu().tolist(), list(strided.shape), list(strided.stride())),
            "other": (str(other.device), other.cpu().tolist()),
            "one_storage": offset.untyped_storage().data_ptr() == base.untyped_storage().data_ptr(),
        }
    )
    base[0:3] = torch.tensor([-1.0, -2.0, -3.0], device="openreg:0")
    torch.openreg.synchronize()
    del base, offset, strided, other
    gc.collect()
    done.set()


def test_a_producer_and_a_consumer_process_share_views_both_ways_and_release():
    context = mp.get_context("spawn")
    queue, results, done = context.Queue(), context.Queue(), context.Event()
    producer = context.Process(target=_producer, args=(queue, results, done))
    consumer = context.Process(target=_consumer, args=(queue, results, done))
    producer.start()
    consumer.start()
    seen = results.get(timeout=TIMEOUT)
    written = results.get(timeout=TIMEOUT)
    still_held = results.get(timeout=TIMEOUT)
    for process in (producer, consumer):
        process.join(timeout=TIMEOUT)
        assert process.exitcode == 0
    cpu = torch.arange(0.0, 64.0)
    assert seen["offset"] == (cpu[4:12].tolist(), 4, [1])
    assert seen["strided"] == (cpu[::4].tolist(), [16], [4])
    assert seen["other"] == ("openreg:1", (torch.arange(10) * 7).tolist())
    assert seen["one_storage"]
    assert written == [-1.0, -2.0, -3.0]
    assert still_held == 0  # the consumer let go before the producer dropped its tensors


def _summer(inbox, outbox):
    while (item := inbox.get(timeout=TIMEOUT)) is not None:
        index, tensor = item
        outbox.put((index, tensor.sum().item(), str(tensor.device)))
        del tensor, item
    outbox.put("done")


def test_many_tensors_of_many_sizes_are_shared_and_every_block_comes_back():
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    child = context.Process(target=_summer, args=(inbox, outbox))
    child.start()
    torch.manual_seed(0)
    expected = {}
    for index in range(200):
        size = int(torch.randint(1, 300_000, ()).item())
        cpu = torch.randint(-100, 100, (size,), dtype=torch.int64)
        expected[index] = (cpu.sum().item(), f"openreg:{index % 2}")
        inbox.put((index, cpu.to(f"openreg:{index % 2}")))  # dropped here at once
    inbox.put(None)
    received = {}
    while (message := outbox.get(timeout=TIMEOUT)) != "done":
        received[message[0]] = message[1:]
    child.join(timeout=TIMEOUT)
    assert child.exitcode == 0
    assert received == expected
    assert torch.openreg.ipc_collect() == 0
    gc.collect()
    for device in range(2):
        assert torch.openreg.memory_allocated(device) == 0


def _short_lived_producer(queue, received):
    queue.put(torch.arange(1000, dtype=torch.float32, device="openreg") * 2)
    # A sender lives until the receiver has the tensor (as with CUDA); then it may exit, and the
    # receiver's mapping keeps the pages.
    assert received.wait(timeout=TIMEOUT)


def test_a_tensor_outlives_the_process_that_allocated_it():
    context = mp.get_context("spawn")
    queue, received = context.Queue(), context.Event()
    producer = context.Process(target=_short_lived_producer, args=(queue, received))
    producer.start()
    tensor = queue.get(timeout=TIMEOUT)
    received.set()
    producer.join(timeout=TIMEOUT)
    assert producer.exitcode == 0
    assert torch.equal(tensor.cpu(), torch.arange(1000, dtype=torch.float32) * 2)
    tensor += 1  # still device memory, still writable
    assert torch.equal(tensor.cpu(), torch.arange(1000, dtype=torch.float32) * 2 + 1)


def _gone_producer(queue):
    queue.put(torch.ones(8, device="openreg"))


def test_a_tensor_whose_sender_exited_before_it_was_received_raises_at_get():
    context = mp.get_context("spawn")
    queue = context.Queue()
    producer = context.Process(target=_gone_producer, args=(queue,))
    producer.start()
    producer.join(timeout=TIMEOUT)  # exits after its queue's feeder flushed the message
    with pytest.raises(RuntimeError, match="which made the handle, has exited"):
        queue.get(timeout=TIMEOUT)


class OpenRegRows(torch.utils.data.Dataset):
    def __len__(self):
        return 10

    def __getitem__(self, index):
        return torch.full((5,), float(index), device="openreg"), index


def test_spawned_dataloader_workers_return_openreg_tensors():
    loader = torch.utils.data.DataLoader(
        OpenRegRows(), batch_size=4, num_workers=2, multiprocessing_context="spawn"
    )
    rows = []
    for batch, indices in loader:
        assert batch.device == torch.device("openreg:0")
        assert torch.equal(batch.cpu(), indices.float()[:, None].expand(-1, 5))
        rows.extend(indices.tolist())
    assert rows == list(range(10))


OUT_OF_MEMORY_SCRIPT = '''
import torch, torch.multiprocessing as mp

def child(inbox, outbox):
    x = inbox.get(timeout=120)
    outbox.put("holding")
    assert inbox.get(timeout=120) == "let go"
    del x
    outbox.put("released")

if __name__ == "__main__":
    context = mp.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=child, args=(inbox, outbox))
    process.start()
    x = torch.ones(10 * 2**20, device="openreg")   # 40 MiB of a 64 MiB device
    inbox.put(x)
    assert outbox.get(timeout=120) == "holding"
    del x                                          # held for the child: not reusable
    inbox.put("let go")
    assert outbox.get(timeout=120) == "released"
    y = torch.ones(10 * 2**20, device="openreg")   # fits only once the held block is freed
    print("allocated", torch.openreg.ipc_collect(), float(y[-1].item()))
    process.join(timeout=120)
'''


def test_the_allocator_frees_blocks_receivers_let_go_of_before_it_runs_out(tmp_path):
    script = tmp_path / "out_of_memory.py"  # spawn imports the main module from a file
    script.write_text(OUT_OF_MEMORY_SCRIPT)
    env = dict(os.environ, OPENREG_DEVICE_MEMORY="64M")
    result = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["allocated", "0", "1.0"]
