"""The profiler sees the device: torch.profiler with ProfilerActivity.PrivateUse1 records every
stream task with its device start and end on a row per stream, linked to the operator that
launched it (csrc/profiler/ActivityProfiler.cpp), and the legacy autograd profiler gets true
device times from the profiler stubs (csrc/profiler/ProfilerStubs.cpp). Durations are checked
against known device work (torch.openreg._sleep), results against the CPU."""

import json
import os
import warnings

import pytest
import torch
from torch.autograd.profiler import profile as autograd_profile
from torch.profiler import ProfilerActivity, profile, record_function, schedule

import torch_openreg
from conftest import run_python

DEVICE = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
TASK_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def trace_events(prof, tmp_path, name="trace.json"):
    path = tmp_path / name
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def tasks(events, name=None):
    """The device tasks of a trace (optionally those named `name`)."""
    return [
        e
        for e in events
        if e.get("ph") == "X" and e.get("cat") in TASK_CATEGORIES and (name is None or e["name"] == name)
    ]


def metadata(events, kind):
    """{pid: name} for process_name, {(pid, tid): name} for thread_name: the first one given."""
    out = {}
    for e in events:
        if e.get("ph") == "M" and e["name"] == kind:
            key = e["pid"] if kind == "process_name" else (e["pid"], e["tid"])
            out.setdefault(key, e["args"]["name"])
    return out


def outermost_cpu_op(events, name):
    """The first CPU operator named `name` (the engine's shape inference calls the operator again
    inside it, on meta tensors)."""
    return min((e for e in events if e.get("cat") == "cpu_op" and e["name"] == name), key=lambda e: e["ts"])


def test_sleep_lasts_at_least_its_duration_on_its_stream_row(tmp_path):
    torch.openreg.synchronize()
    with profile(activities=DEVICE) as prof:
        torch.openreg._sleep(40)
    events = trace_events(prof, tmp_path)
    [sleep] = tasks(events, "openreg::_sleep")
    assert sleep["dur"] >= 40_000  # microseconds
    assert sleep["pid"] == 0
    assert metadata(events, "process_name")[0] == "openreg:0"
    assert metadata(events, "thread_name")[(0, sleep["tid"])] == "stream 0"
    # The device time also reaches the profile's own tables.
    [row] = [e for e in prof.key_averages() if e.key == "openreg::_sleep"]
    assert row.self_device_time_total >= 40_000


def test_kernel_is_charged_to_the_operator_that_launched_it(tmp_path):
    a = torch.randn(128, 96)
    b = torch.randn(96, 64)
    da, db = a.to("openreg"), b.to("openreg")
    torch.openreg.synchronize()
    with profile(activities=DEVICE) as prof:
        c = torch.mm(da, db)
        torch.openreg._sleep(20)  # keeps the stream busy: the kernel is not inside the sleep
    assert torch.equal(c.cpu(), torch.mm(a, b))  # profiling changes no result
    events = trace_events(prof, tmp_path)
    [kernel] = tasks(events, "aten::mm kernel")
    mm = outermost_cpu_op(events, "aten::mm")
    assert kernel["args"]["External id"] == mm["args"]["External id"]
    assert kernel["cat"] == "kernel" and kernel["pid"] == 0
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["aten::mm"].self_device_time_total > 0
    assert averages["aten::mm"].self_device_time_total == pytest.approx(kernel["dur"], abs=0.01)
    assert averages["aten::mm"].device_time_total == pytest.approx(kernel["dur"], abs=0.01)
    # The sleep is no operator's: it is charged to none.
    assert averages["aten::mm"].self_device_time_total < 20_000 or kernel["dur"] >= 20_000
    # PyTorch moves a kernel from an operator to its only child of the same name.
    assert [k.name for e in prof.events() if e.name == "aten::mm" for k in e.kernels] == ["aten::mm kernel"]


def test_two_streams_and_two_devices_are_separate_rows(tmp_path):
    a = torch.randn(64, 64)
    d0 = a.to("openreg:0")
    d1 = a.to("openreg:1")
    side = torch.openreg.Stream(device=0)
    torch.openreg.synchronize(0)
    torch.openreg.synchronize(1)
    with profile(activities=DEVICE) as prof:
        x = d0 + d0
        with torch.openreg.stream(side):
            y = d0 * d0
        z = d1 - 1
        torch.openreg.synchronize(0)
        torch.openreg.synchronize(1)
    assert torch.equal(x.cpu(), a + a) and torch.equal(y.cpu(), a * a) and torch.equal(z.cpu(), a - 1)
    events = trace_events(prof, tmp_path)
    threads = metadata(events, "thread_name")
    [add] = tasks(events, "aten::add kernel")
    [mul] = tasks(events, "aten::mul kernel")
    [sub] = tasks(events, "aten::sub kernel")
    assert (add["pid"], threads[(0, add["tid"])]) == (0, "stream 0")
    assert (mul["pid"], threads[(0, mul["tid"])]) == (0, f"stream {side.stream_id}")
    assert add["tid"] != mul["tid"]
    assert (sub["pid"], threads[(1, sub["tid"])]) == (1, "stream 0")
    assert metadata(events, "process_name")[1] == "openreg:1"
    assert add["args"]["stream"] == 0 and mul["args"]["stream"] == side.stream_id


@pytest.mark.parametrize("numel", [1000, 2**19], ids=["runtime copy", "copy_ task of 2 MiB"])
def test_copies_are_memcpy_tasks_of_the_copy_operator(tmp_path, numel):
    host = torch.randn(numel)
    with profile(activities=DEVICE) as prof:
        on0 = host.to("openreg:0")
        on1 = on0.to("openreg:1")
        back = on1.cpu()
    assert torch.equal(back, host)
    events = trace_events(prof, tmp_path)
    copies = tasks(events)
    assert [(e["name"], e["cat"]) for e in copies] == [
        ("Memcpy HtoD", "gpu_memcpy"),
        ("Memcpy DtoD", "gpu_memcpy"),
        ("Memcpy DtoH", "gpu_memcpy"),
    ]
    # Each is charged to the innermost operator that launched it: openreg's _copy_from.
    copy_ids = [
        e["args"]["External id"] for e in events if e.get("cat") == "cpu_op" and e["name"] == "aten::_copy_from"
    ]
    assert [e["args"]["External id"] for e in copies] == copy_ids
    assert all(e["dur"] >= 0 for e in copies)


def test_each_task_has_a_flow_arrow_from_its_launch(tmp_path):
    a = torch.randn(32, 32, device="openreg")
    with profile(activities=DEVICE) as prof:
        b = a.relu()
        c = b @ b
        c.sum()
    events = trace_events(prof, tmp_path)
    starts = {e["id"]: e for e in events if e.get("ph") == "s" and e.get("cat") == "ac2g"}
    ends = {e["id"]: e for e in events if e.get("ph") == "f" and e.get("cat") == "ac2g"}
    launches = {(e["pid"], e["tid"], e["ts"]): e for e in events if e.get("cat") == "privateuse1_runtime"}
    device_tasks = tasks(events)
    assert len(device_tasks) >= 3
    for task in device_tasks:
        [flow] = [i for i, f in ends.items() if (f["pid"], f["tid"], f["ts"]) == (task["pid"], task["tid"], task["ts"])]
        start = starts[flow]
        assert start["pid"] == os.getpid()
        assert start["ts"] <= task["ts"]
        launch = launches[(start["pid"], start["tid"], start["ts"])]
        assert launch["args"]["External id"] == task["args"]["External id"]


def test_cpu_only_profile_records_no_device_activity(tmp_path):
    a = torch.randn(16, device="openreg")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        assert not torch_openreg._C._device_activity_recording()
        a + a
    assert tasks(trace_events(prof, tmp_path)) == []
    with profile(activities=DEVICE):
        assert torch_openreg._C._device_activity_recording()
    assert not torch_openreg._C._device_activity_recording()


def test_schedule_records_only_active_steps_and_calls_on_trace_ready(tmp_path):
    a = torch.randn(16, device="openreg")
    ready = []

    def on_trace_ready(prof):
        ready.append(trace_events(prof, tmp_path, f"trace{len(ready)}.json"))

    with profile(
        activities=DEVICE,
        schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
        on_trace_ready=on_trace_ready,
    ) as prof:
        for step in range(6):
            torch.mul(a, step)
            prof.step()
    assert len(ready) == 1
    assert len(tasks(ready[0], "aten::mul kernel")) == 2


def test_legacy_autograd_profiler_gives_true_device_times_without_warnings():
    a = torch.randn(64, 64)
    da = a.to("openreg")
    torch.openreg.synchronize()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "PrivateUse1 used in profiler but not enabled" would raise
        with autograd_profile(use_device="openreg") as prof:
            with record_function("sleepy"):
                torch.openreg._sleep(30)
            b = da + da
    assert torch.equal(b.cpu(), a + a)
    [sleepy] = [e for e in prof.function_events if e.name == "sleepy"]
    [add] = [e for e in prof.function_events if e.name == "aten::add"]
    assert sleepy.device_time_total >= 30_000  # microseconds, as the CUDA stubs give them
    assert 0 < add.device_time_total < sleepy.device_time_total


def test_a_failed_kernel_raises_as_without_profiler_and_is_marked_failed(tmp_path):
    data = torch.arange(12.0).view(3, 4).to("openreg")
    bad = torch.tensor([0, 7]).to("openreg")  # row 7 of a 3-row tensor: fails inside its task
    torch.openreg.synchronize()
    with profile(activities=DEVICE) as prof:
        result = data.index_select(0, bad)
        with pytest.raises(IndexError, match="index out of range in self"):
            result.cpu()  # does not run: reads what the failed kernel poisoned
    events = trace_events(prof, tmp_path)
    [kernel] = tasks(events, "aten::index_select kernel")
    assert kernel["args"]["failed"] == 1
    [copy] = tasks(events, "Memcpy DtoH")
    assert copy["args"]["failed"] == 1
    ok = data + 1  # the device stays usable
    assert torch.equal(ok.cpu(), torch.arange(12.0).view(3, 4) + 1)


def test_autograd_profiler_with_kineto_charges_kernels_to_operators():
    a = torch.randn(64, 64)
    da = a.to("openreg")
    torch.openreg.synchronize()
    with autograd_profile(use_device="openreg", use_kineto=True) as prof:
        b = da @ da
    assert torch.equal(b.cpu(), a @ a)
    [kernel] = [e for e in prof.function_events if e.name == "aten::mm kernel"]
    charged = [e for e in prof.function_events if e.name == "aten::mm" and e.device_time_total > 0]
    assert kernel.device_time_total > 0
    assert [e.device_time_total for e in charged] == [kernel.device_time_total]


def test_work_launched_in_a_range_outside_operators_is_charged_to_the_range(tmp_path):
    a = torch.randn(16, device="openreg")
    torch.openreg.synchronize()
    with profile(activities=DEVICE) as prof:
        with record_function("sleepy"):
            torch.openreg._sleep(20)
            a + a  # an operator inside the range: its kernel stays the operator's
    events = trace_events(prof, tmp_path)
    [sleep] = tasks(events, "openreg::_sleep")
    [add] = tasks(events, "aten::add kernel")
    [sleepy] = [e for e in events if e.get("cat") == "user_annotation" and e["name"] == "sleepy"]
    assert sleep["args"]["External id"] == sleepy["args"]["External id"]
    assert add["args"]["External id"] == outermost_cpu_op(events, "aten::add")["args"]["External id"]
    averages = {e.key: e for e in prof.key_averages()}
    assert averages["sleepy"].self_device_time_total == pytest.approx(sleep["dur"], abs=0.01)
    assert sleep["dur"] >= 20_000


def test_launch_blocking_keeps_every_task_on_its_row():
    code = """
        import json, tempfile, torch
        from torch.profiler import ProfilerActivity, profile
        a = torch.randn(64, 64)
        da = a.to("openreg")
        side = torch.openreg.Stream()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as prof:
            x = da @ da
            with torch.openreg.stream(side):
                y = da + da
        assert torch.equal(x.cpu(), a @ a) and torch.equal(y.cpu(), a + a)
        path = tempfile.mktemp(suffix=".json")
        prof.export_chrome_trace(path)
        events = json.load(open(path))["traceEvents"]
        print(sorted((e["name"], e["tid"]) for e in events if e.get("cat") == "kernel"))
    """
    result = run_python(code, env={"OPENREG_LAUNCH_BLOCKING": "1"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[('aten::add kernel', 1), ('aten::mm kernel', 0)]"


def test_a_cpu_profile_lists_the_programs_operators_not_a_tasks_inner_calls():
    # Note [Tasks run below autograd]: a CPU kernel's own ATen calls inside a task are the device's
    # work. A host read may run the queued tasks on the host's thread (Note [A waiting host runs
    # the queued tasks]); they must not appear among that thread's operators.
    a = torch.randn(4, device="openreg")
    for _ in range(5):
        (a + 1).sum().item()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(20):
            (a + 1).sum().item()
    counts = {e.key: e.count for e in prof.key_averages()}
    called = {"aten::add", "aten::sum", "aten::item", "aten::_local_scalar_dense", "aten::resolve_conj",
              "aten::resolve_neg"}
    host_copy = {"aten::to", "aten::_to_copy", "aten::empty_strided", "aten::copy_", "aten::_copy_from"}
    assert set(counts) <= called | host_copy, sorted(set(counts) - called - host_copy)
    assert counts["aten::add"] == counts["aten::sum"] == counts["aten::to"] == 20
