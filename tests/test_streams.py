"""Streams and events through torch.openreg, torch.Stream/torch.Event and torch.accelerator.

`torch.openreg._sleep(ms)` keeps the current stream busy, so the tests can see work pending."""

import json
import time

import pytest
import torch

from conftest import run_python

openreg = torch.openreg


def test_default_and_current_streams():
    default = openreg.default_stream()
    assert default.stream_id == 0 and default.device_index == 0
    assert openreg.current_stream() == default
    assert openreg.default_stream(1).device_index == 1
    assert torch.accelerator.current_stream() == default
    assert isinstance(default, torch.Stream)


def test_pool_streams_have_priorities_and_distinct_ids():
    normal = [openreg.Stream() for _ in range(3)]
    high = openreg.Stream(priority=-1)
    assert len({s.stream_id for s in normal}) == 3
    assert all(s.priority == 0 for s in normal)
    assert high.priority == -1
    assert openreg.Stream(device=1).device_index == 1
    generic = torch.Stream(device="openreg:1", priority=-1)
    assert generic.device_index == 1 and generic.device_type == openreg.default_stream().device_type


def test_stream_context_sets_stream_and_device_then_restores_both():
    s1 = openreg.Stream(device=1)
    with openreg.stream(s1):
        assert openreg.current_device() == 1
        assert openreg.current_stream() == s1
    assert openreg.current_device() == 0
    assert openreg.current_stream(1) == openreg.default_stream(1)
    with torch.Stream(device="openreg:0") as s0:  # torch.Stream's own context manager
        assert torch.accelerator.current_stream() == s0
    assert openreg.current_stream() == openreg.default_stream()


def test_set_stream_matches_torch_accelerator():
    s = openreg.Stream()
    torch.accelerator.set_stream(s)
    assert openreg.current_stream() == s
    openreg.set_stream(openreg.default_stream())
    assert torch.accelerator.current_stream().stream_id == 0


def test_query_and_synchronize_follow_pending_work():
    s = openreg.Stream()
    with openreg.stream(s):
        openreg._sleep(100)
    assert not s.query()
    assert openreg.default_stream().query()  # other streams are not held up
    s.synchronize()
    assert s.query()


def test_device_synchronize_waits_for_every_stream():
    streams = [openreg.Stream(), openreg.Stream(device=1)]
    for s in streams:
        with openreg.stream(s):
            openreg._sleep(60)
    start = time.monotonic()
    openreg.synchronize(0)
    assert streams[0].query()
    torch.accelerator.synchronize(1)
    assert streams[1].query()
    assert time.monotonic() - start < 5


def test_event_record_query_synchronize():
    s = openreg.Stream()
    event = openreg.Event()
    assert isinstance(event, openreg.Event) and isinstance(event, torch.Event)
    assert event.query()  # never recorded
    with openreg.stream(s):
        openreg._sleep(80)
        event.record()
    assert not event.query()
    event.synchronize()
    assert event.query() and s.query()


def test_elapsed_time_measures_device_work():
    start, end = openreg.Event(enable_timing=True), openreg.Event(enable_timing=True)
    start.record()
    openreg._sleep(50)
    end.record()
    end.synchronize()
    assert 49 <= start.elapsed_time(end) < 2000


def test_elapsed_time_errors():
    untimed = openreg.Event()
    untimed.record()
    with pytest.raises(ValueError, match="enable_timing=True"):
        untimed.elapsed_time(openreg.Event())
    a, b = openreg.Event(enable_timing=True), openreg.Event(enable_timing=True)
    with pytest.raises(ValueError, match="must be recorded"):
        a.elapsed_time(b)
    a.record()
    openreg._sleep(100)
    b.record()
    with pytest.raises(RuntimeError, match="must be completed"):  # torch queries before asking us
        a.elapsed_time(b)
    b.synchronize()
    assert a.elapsed_time(b) >= 99


def test_wait_event_orders_streams_across_devices():
    producer = openreg.Stream(device=1)
    consumer = openreg.Stream(device=0)
    event = torch.Event(device="openreg:1")
    with openreg.stream(producer):
        openreg._sleep(150)
        event.record()
    consumer.wait_event(event)
    with openreg.stream(consumer):
        openreg._sleep(1)
    assert not consumer.query()  # parked behind device 1's work
    consumer.synchronize()
    assert event.query() and producer.query()


def test_wait_stream_and_record_event():
    a, b = openreg.Stream(), openreg.Stream()
    with openreg.stream(a):
        openreg._sleep(100)
    b.wait_stream(a)
    assert not b.query()
    recorded = a.record_event()
    assert isinstance(recorded, torch.Event) and not recorded.query()
    b.synchronize()
    assert a.query() and recorded.query()


def test_record_on_a_stream_of_another_device_is_rejected():
    event = torch.Event(device="openreg:0")
    event.record(openreg.default_stream(0))
    with pytest.raises(RuntimeError):
        event.record(openreg.default_stream(1))


def test_misuse_gives_clear_errors():
    cpu_stream = torch.Stream(device="cpu")
    with pytest.raises(ValueError, match="expected an openreg stream"):
        openreg.set_stream(cpu_stream)
    with pytest.raises(ValueError, match="expected an openreg stream"):
        openreg.stream(cpu_stream).__enter__()
    with pytest.raises(ValueError, match="expected an openreg device, got 'cpu'"):
        openreg.Stream(device="cpu")
    with pytest.raises(RuntimeError, match="invalid device index 3: there are 2 openreg devices"):
        openreg.Stream(device=3)
    with pytest.raises(RuntimeError, match="does not match recording stream's device type"):
        openreg.Event().record(cpu_stream)
    assert openreg.Stream(priority=5).priority == 0  # clamped into the range, as on CUDA
    assert openreg.Stream(priority=-7).priority == -1


def test_setting_a_stream_of_another_device_type_says_what_to_pass():
    cpu_stream = torch.Stream(device="cpu")
    for set_stream in (torch.accelerator.set_stream, openreg.set_stream):
        with pytest.raises(ValueError) as info:
            set_stream(cpu_stream)
        message = str(info.value)
        assert "not an openreg stream" in message, message
        assert "cpu" in message.lower(), message
        assert "torch.openreg.Stream()" in message and "torch.accelerator.current_stream()" in message
        assert "invalid device index" not in message
    assert openreg.current_device() == 0 and openreg.current_stream() == openreg.default_stream(0)
    s = openreg.Stream()
    torch.accelerator.set_stream(s)
    assert openreg.current_stream() == s
    x = torch.arange(6.0)
    assert torch.equal((x.to("openreg") * 2).cpu(), x * 2)


# Note [OpenMP threads on shared cores] (runtime/src/OpenMpThreads.h): a device worker idle for
# OPENREG_OPENMP_RELEASE_US, or a host thread blocked on the device that long, ends its OpenMP
# helper threads, so that the threads of the side that computes keep spinning between parallel
# regions; by default (auto) only while no other process uses openreg, and this test's own
# process does. Counted by thread name: a helper takes the name of the thread that started it.
OPENMP_THREADS_PROGRAM = """
import json, os, time
import torch, torch_openreg

def named(name):
    count = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                count += f.read().strip() == name
        except FileNotFoundError:
            pass  # a helper that ended between the listing and the read: what is being waited for
    return count

def poll(name, expected, seconds=2.0):
    deadline = time.monotonic() + seconds
    while named(name) != expected and time.monotonic() < deadline:
        time.sleep(0.001)
    return named(name)

host = open("/proc/self/comm").read().strip()
seen = {}
a = torch.zeros(2048, 2048, device="openreg")
for _ in range(60):
    a.add_(1)  # parallel kernels: the worker's pool has a helper while they run
seen["worker busy"] = poll("openreg0w0", 2)
torch.openreg.synchronize()
seen["worker idle"] = poll("openreg0w0", 1, seconds=0.2)
threads = named(host)
x = torch.randn(512, 512)
expected = x.mm(x)  # a parallel CPU kernel on the host thread: its pool gets a helper
seen["host helpers"] = named(host) - threads
torch.openreg._sleep(20)
torch.openreg.synchronize()  # blocks for 20 ms
seen["host helpers after a blocked wait"] = named(host) - threads
y = x.to("openreg")
seen["bitwise"] = torch.equal(y.mm(y).cpu(), expected) and bool((a.cpu() == 60).all())
print(json.dumps(seen))
"""


def run_openmp_threads_program(release: str, release_us: str = "1000") -> dict:
    env = {"OPENREG_OPENMP_RELEASE": release, "OPENREG_OPENMP_RELEASE_US": release_us}
    result = run_python(OPENMP_THREADS_PROGRAM, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_idle_workers_and_blocked_hosts_end_their_openmp_helpers():
    seen = run_openmp_threads_program("1")
    assert seen == {
        "worker busy": 2,
        "worker idle": 1,
        "host helpers": 1,
        "host helpers after a blocked wait": 0,
        "bitwise": True,
    }


def test_openmp_release_us_minus_one_keeps_every_helper():
    seen = run_openmp_threads_program("1", release_us="-1")
    assert seen == {
        "worker busy": 2,
        "worker idle": 2,
        "host helpers": 1,
        "host helpers after a blocked wait": 1,
        "bitwise": True,
    }


def test_openmp_release_auto_keeps_helpers_while_another_process_uses_openreg():
    torch.zeros(1, device="openreg")  # this process uses openreg: the child is not alone
    seen = run_openmp_threads_program("auto")
    assert seen["worker idle"] == 2 and seen["host helpers after a blocked wait"] == 1
    assert seen["bitwise"]
