"""Bad inputs on openreg: each is refused at the call with the exception type the CPU (or CUDA)
raises, a message that names openreg and the operator or API call where openreg words it, and
the device works afterwards (a small computation equal to the CPU's).

The cases that need a process of their own (configuration from the environment, fork, spawn) run
as subprocesses started together, once per module, so the file stays fast."""

import gc
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
import torch.nn.functional as F

openreg = torch.openreg
INVALID_INDEX = "openreg: invalid device index 7: there are 2 openreg devices (indices 0 to 1)"


def device_works(device=0):
    x = torch.arange(6.0).view(2, 3)
    y = x.to(f"openreg:{device}")
    assert torch.equal((y @ y.t() + 1).cpu(), x @ x.t() + 1)


def drain_task_errors():
    """Synchronizes every device, dropping the task errors a failed call left behind."""
    for index in range(openreg.device_count()):
        try:
            openreg.synchronize(index)
        except (RuntimeError, IndexError, ValueError, TypeError):
            pass


@pytest.fixture(autouse=True)
def leave_no_task_error():
    yield
    drain_task_errors()


# --- bad device index ---------------------------------------------------------------------------

# call: (what it does, the operator the message names or None where openreg cannot know the call)
BAD_INDEX_CALLS = {
    "torch.empty": (lambda: torch.empty(3, device="openreg:7"), "aten::empty.memory_format on openreg:7"),
    "torch.ones": (lambda: torch.ones(3, device="openreg:7"), "aten::empty.memory_format on openreg:7"),
    "Tensor.to from the cpu": (lambda: torch.ones(3).to("openreg:7"), "aten::empty_strided on openreg:7"),
    "Tensor.to from openreg": (lambda: torch.ones(3, device="openreg").to("openreg:7"), "aten::empty_strided"),
    "torch.openreg.set_device": (lambda: openreg.set_device(7), None),
    "torch.accelerator.set_device_index": (lambda: torch.accelerator.set_device_index(7), None),
    "torch.openreg.device": (lambda: openreg.device(7).__enter__(), None),
    "torch.accelerator.device_index": (lambda: torch.accelerator.device_index(7).__enter__(), None),
    "torch.openreg.Stream": (lambda: openreg.Stream(device=7), None),
    "torch.Stream": (lambda: torch.Stream(device="openreg:7"), None),
    "torch.openreg.current_stream": (lambda: openreg.current_stream(7), None),
    "torch.openreg.synchronize": (lambda: openreg.synchronize(7), None),
    "torch.openreg.memory_allocated": (lambda: openreg.memory_allocated(7), None),
    "torch.openreg.mem_get_info": (lambda: openreg.mem_get_info(7), None),
    "torch.openreg.get_device_properties": (lambda: openreg.get_device_properties(7), None),
}


@pytest.mark.parametrize("name", BAD_INDEX_CALLS)
def test_a_bad_device_index_names_the_device_count(name):
    call, operator = BAD_INDEX_CALLS[name]
    with pytest.raises(RuntimeError) as info:
        call()
    message = str(info.value)
    assert message.startswith(INVALID_INDEX) and "OPENREG_DEVICE_COUNT" in message, message
    if operator is not None:
        assert f"(openreg: {operator}" in message, message
    assert openreg.current_device() == 0
    assert openreg.current_stream() == openreg.default_stream(0)
    device_works()


def test_an_event_recorded_on_another_devices_stream_is_refused():
    event = torch.Event(device="openreg:0")
    event.record(openreg.default_stream(0))
    with pytest.raises(RuntimeError,
                       match="openreg: event device index 0 does not match the recording stream's device 1"):
        event.record(openreg.default_stream(1))
    event.synchronize()
    device_works(1)


# --- tensors of two devices in one operator -----------------------------------------------------


def test_tensors_of_two_devices_in_one_operator():
    a, b = torch.ones(3, 3, device="openreg:0"), torch.ones(3, 3, device="openreg:1")
    same_device = "Expected all tensors to be on the same device, but found at least two devices"
    with pytest.raises(RuntimeError) as info:
        torch.mm(a, b)  # the engine's check names the operator
    assert str(info.value) == f"{same_device}, openreg:0 and openreg:1! (openreg: aten::mm)"
    with pytest.raises(RuntimeError) as info:
        torch.mm(a, torch.ones(3, 3))
    assert str(info.value) == f"{same_device}, openreg:0 and cpu! (openreg: aten::mm)"
    with pytest.raises(RuntimeError) as info:
        a + b  # structured operators reach the engine directly (Note [Structured operators on the engine])
    assert str(info.value) == f"{same_device}, openreg:0 and openreg:1! (openreg: aten::add.Tensor)"
    assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.full((3, 3), 2.0))  # a CPU scalar is fine
    device_works(0)
    device_works(1)


# --- out of memory, overflowing and negative sizes ----------------------------------------------


def test_out_of_memory_raises_at_the_call_and_the_device_recovers():
    gc.collect()  # tensors of earlier tests must not be freed during the measurement
    openreg.synchronize()
    before = openreg.memory_stats()
    with pytest.raises(torch.OutOfMemoryError) as info:
        torch.empty(1 << 40, dtype=torch.uint8, device="openreg")
    message = str(info.value)
    assert message.startswith("openreg out of memory on device 0. Tried to allocate 1024.00 GiB"), message
    assert "(openreg: aten::empty.memory_format on openreg)" in message, message
    after = openreg.memory_stats()
    assert after["num_ooms"] == before["num_ooms"] + 1
    for key in ("allocated_bytes.all.current", "active_bytes.all.current", "requested_bytes.all.current"):
        assert after[key] == before[key], key
    device_works()
    assert openreg.memory_allocated() == before["allocated_bytes.all.current"]


# call on a device: the CPU raises RuntimeError with the same words, openreg adds the operator
SIZE_CALLS = {
    "empty overflowing": lambda device: torch.empty(2**62, device=device),
    "ones overflowing": lambda device: torch.ones(2**31, 2**31, device=device),
    "empty_strided overflowing": lambda device: torch.empty_strided((2, 2), (2**62, 1), device=device),
    "empty negative": lambda device: torch.empty(-1, device=device),
    "full negative": lambda device: torch.full((2, -3), 1.0, device=device),
    "randn negative": lambda device: torch.randn(-2, device=device),
}


@pytest.mark.parametrize("name", SIZE_CALLS)
def test_overflowing_and_negative_sizes_raise_the_cpus_error(name):
    call = SIZE_CALLS[name]
    with pytest.raises(Exception) as cpu:
        call("cpu")
    gc.collect()  # tensors of earlier tests must not be freed during the measurement
    allocated = openreg.memory_allocated()
    with pytest.raises(type(cpu.value)) as info:
        call("openreg")
    message = str(info.value)
    assert message.startswith(str(cpu.value)), message
    assert "(openreg: aten::empty" in message and "on openreg)" in message, message
    assert openreg.memory_allocated() == allocated  # nothing is held for a refused request
    device_works()


# --- indices out of range -----------------------------------------------------------------------

DATA = torch.arange(12.0).view(3, 4)
OUT_OF_RANGE = torch.tensor([0, 5])
INDEX_CALLS = {
    "index_select": (lambda x, i: torch.index_select(x, 0, i), "index_select"),
    "gather": (lambda x, i: torch.gather(x, 0, i.view(1, 2)), "gather"),
    "embedding": (lambda x, i: F.embedding(i, x), "index_select"),  # embedding composes it
    "advanced indexing": (lambda x, i: x[i], "index"),
}


@pytest.mark.parametrize("name", INDEX_CALLS)
def test_an_index_out_of_range_raises_the_cpus_exception_whenever_the_result_is_read(name):
    # The index is checked inside the kernel, asynchronously as on CUDA: the error reaches every
    # reader of the result, as the CPU's exception type, naming the device and the operator
    # (docs/errors.md), and the result is never read as data.
    call, operator = INDEX_CALLS[name]
    with pytest.raises(Exception) as cpu:
        call(DATA, OUT_OF_RANGE)
    result = call(DATA.to("openreg"), OUT_OF_RANGE.to("openreg"))
    for read in (lambda: result.cpu(), lambda: result.sum().item(), lambda: str(result)):
        with pytest.raises(type(cpu.value)) as info:
            read()
        assert "device 0" in str(info.value) and operator in str(info.value), str(info.value)
        assert "frame #" not in str(info.value) and "Exception raised from" not in str(info.value)
    drain_task_errors()
    device_works()


# --- handles that are not (or no longer) live ---------------------------------------------------


def openreg_stream(stream_id, device_index):
    device_type = openreg.default_stream().device_type
    return torch.Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


def test_a_stream_id_that_is_not_live_is_refused_wherever_it_is_used():
    stale = openreg_stream(12345, 0)
    not_live = "the stream handle is not live (destroyed, or never created)"
    for use, api in (
        (lambda: torch.accelerator.set_stream(stale), "orStreamGetDevice"),
        (lambda: openreg.set_stream(stale), "orStreamGetDevice"),
        (lambda: openreg.stream(stale).__enter__(), "orStreamGetDevice"),
        (stale.query, "orStreamQuery"),
        (stale.synchronize, "orStreamSynchronize"),
        (lambda: torch.Event(device="openreg").record(stale), "orEventRecord"),
        (lambda: stale.wait_event(torch.Event(device="openreg")), None),  # never recorded: nothing to wait for
    ):
        if api is None:
            use()
            continue
        with pytest.raises(RuntimeError) as info:
            use()
        assert f"openreg: {api}: {not_live}" in str(info.value), str(info.value)
        assert openreg.current_stream() == openreg.default_stream(0)
    device_works()


def test_another_devices_stream_is_not_made_current_on_this_device():
    theirs = openreg.Stream(device=1)
    claimed = openreg_stream(theirs.stream_id, 0)
    for set_stream in (torch.accelerator.set_stream, openreg.set_stream):
        with pytest.raises(ValueError) as info:
            set_stream(claimed)
        message = str(info.value)
        named = f"openreg:0 stream {theirs.stream_id >> 32} names a stream of device openreg:1"
        assert f"{named}, not of openreg:0" in message, message
        assert "torch.openreg.Stream()" in message
        assert openreg.current_stream(0) == openreg.default_stream(0)
    device_works()


# --- host code given a device tensor ------------------------------------------------------------


def test_host_code_that_needs_a_cpu_tensor_says_to_copy_it_first():
    x_cpu = torch.linspace(0, 1, 5)
    x = x_cpu.to("openreg")
    expected = ("can't convert openreg:0 device type tensor to numpy. "
                "Use Tensor.cpu() to copy the tensor to host memory first.")
    for host_call in (x.numpy, lambda: np.asarray(x)):
        with pytest.raises(TypeError) as info:
            host_call()
        assert str(info.value) == expected
    assert np.array_equal(x.numpy(force=True), x_cpu.numpy())  # the explicit copy works
    assert x.tolist() == x_cpu.tolist() and x[2].item() == x_cpu[2].item()
    device_works()


# --- configuration, fork and spawn: in subprocesses ---------------------------------------------

CONFIGURATION_SCRIPT = """
import json, torch
result = {"count": torch.openreg.device_count(), "errors": []}
for attempt in range(2):  # a second use raises the same error: nothing half set up
    try:
        torch.ones(3, device="openreg")
        result["errors"].append(None)
    except Exception as e:
        result["errors"].append([type(e).__name__, str(e)])
result["cpu"] = (torch.arange(3.0) * 2).tolist()
print(json.dumps(result))
"""

FORK_AND_SPAWN_SCRIPT = """
import json, multiprocessing as mp, torch

def forked(queue):
    errors = []
    for call in (lambda: torch.ones(3, device="openreg"), lambda: parent_tensor + 1, lambda: parent_tensor.cpu()):
        try:
            call()
            errors.append(None)
        except RuntimeError as e:
            errors.append(str(e))
    queue.put(errors)

def spawned(x):
    return (x.to("openreg") * 2 + 1).cpu()

if __name__ == "__main__":
    parent_tensor = torch.arange(4.0, device="openreg")
    context = mp.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=forked, args=(queue,))
    child.start()
    fork_errors = queue.get(timeout=60)
    child.join()
    with mp.get_context("spawn").Pool(1) as pool:
        (spawn_result,) = pool.map(spawned, [torch.arange(5.0)])
    print(json.dumps({
        "fork_errors": fork_errors,
        "fork_exitcode": child.exitcode,
        "spawn_result": spawn_result.tolist(),
        "parent_after": (parent_tensor * 3).cpu().tolist(),
    }))
"""

SUBPROCESSES = {
    "OPENREG_DEVICE_COUNT=0": (CONFIGURATION_SCRIPT, {"OPENREG_DEVICE_COUNT": "0"}),
    "OPENREG_DEVICE_COUNT=abc": (CONFIGURATION_SCRIPT, {"OPENREG_DEVICE_COUNT": "abc"}),
    "OPENREG_DEVICE_COUNT=65": (CONFIGURATION_SCRIPT, {"OPENREG_DEVICE_COUNT": "65"}),
    "OPENREG_DEVICE_MEMORY=garbage": (CONFIGURATION_SCRIPT, {"OPENREG_DEVICE_MEMORY": "garbage"}),
    "OPENREG_FALLBACK=bogus": (CONFIGURATION_SCRIPT, {"OPENREG_FALLBACK": "bogus"}),
    "fork and spawn": (FORK_AND_SPAWN_SCRIPT, {}),
}


@pytest.fixture(scope="module")
def subprocess_results(tmp_path_factory):
    """Starts every subprocess at once, then collects each one's JSON line."""
    directory = tmp_path_factory.mktemp("bad_inputs")
    running = {}
    for name, (script, env) in SUBPROCESSES.items():
        path = directory / f"{len(running)}.py"  # spawn needs a file to import the main module from
        path.write_text(textwrap.dedent(script))
        running[name] = subprocess.Popen(
            [sys.executable, str(path)], env={**os.environ, **env},
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
    results = {}
    for name, process in running.items():
        stdout, stderr = process.communicate(timeout=180)
        assert process.returncode == 0, f"{name}: {stderr}"
        results[name] = json.loads(stdout.strip().splitlines()[-1])
    return results


CONFIGURATION_ERRORS = {
    "OPENREG_DEVICE_COUNT=0": ("openreg: invalid OPENREG_DEVICE_COUNT='0': expected an integer from 1 to 64.", 0),
    "OPENREG_DEVICE_COUNT=abc": ("openreg: invalid OPENREG_DEVICE_COUNT='abc': expected an integer from 1 to 64.", 0),
    "OPENREG_DEVICE_COUNT=65": ("openreg: invalid OPENREG_DEVICE_COUNT='65': expected an integer from 1 to 64.", 0),
    "OPENREG_DEVICE_MEMORY=garbage": (
        ("openreg: invalid OPENREG_DEVICE_MEMORY='garbage': expected a byte count from 1M to 4T, optionally with a "
         "K, M, G or T suffix."),
        0,
    ),
    # The PyTorch layer's variables are read through the runtime's registry too; an invalid one is a
    # ValueError, raised at the first use of a device (tests/test_config.py).
    "OPENREG_FALLBACK=bogus": ("openreg: invalid OPENREG_FALLBACK='bogus': expected allow, warn or error.", 2),
}


@pytest.mark.parametrize("name", CONFIGURATION_ERRORS)
def test_an_invalid_environment_variable_fails_the_first_use_clearly(name, subprocess_results):
    expected, count = CONFIGURATION_ERRORS[name]
    result = subprocess_results[name]
    assert result["count"] == count  # device queries never fail
    first, second = result["errors"]
    kind = "ValueError" if name.startswith("OPENREG_FALLBACK") else "RuntimeError"
    assert first[0] == kind and first[1].startswith(expected), first
    assert second == first
    assert result["cpu"] == [0.0, 2.0, 4.0]


def test_a_child_forked_after_init_is_told_to_use_spawn_and_spawn_works(subprocess_results):
    result = subprocess_results["fork and spawn"]
    assert result["fork_exitcode"] == 0
    assert len(result["fork_errors"]) == 3
    for error in result["fork_errors"]:
        assert error is not None and "openreg" in error and "forked subprocess" in error and "'spawn'" in error, error
    assert result["spawn_result"] == (torch.arange(5.0) * 2 + 1).tolist()
    assert result["parent_after"] == [0.0, 3.0, 6.0, 9.0]
