"""torch.openreg.debug: each mode catches its planted bug (a wrong kernel, a NaN, a missing stream
wait, a free without record_stream, an injected OOM, kernel failure or lost device) and names it,
passes a correct program, and is turned on by its environment variable."""

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python
from torch_openreg.openreg import debug

# A planted wrong kernel: scale's openreg kernel adds 1e-6 to what the CPU's computes.
_lib = torch.library.Library("openreg_debug_test", "DEF")
_lib.define("scale(Tensor x) -> Tensor")
_lib.impl("scale", lambda x: x * 2, "CPU")
_lib.impl("scale", lambda x: x * 2 + 1e-6, "PrivateUse1")
# And one whose openreg kernel accepts what the CPU's refuses.
_lib.define("checked_sqrt(Tensor x) -> Tensor")


def _cpu_checked_sqrt(x: torch.Tensor) -> torch.Tensor:
    if bool((x < 0).any()):
        raise ValueError("checked_sqrt: negative input")
    return x.sqrt()


_lib.impl("checked_sqrt", _cpu_checked_sqrt, "CPU")
_lib.impl("checked_sqrt", lambda x: x.abs().sqrt(), "PrivateUse1")


def _small_training_step(device: str) -> torch.Tensor:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3)).to(device)
    x = torch.arange(32.0).view(4, 8).to(device) / 32
    loss = F.cross_entropy(model(x), torch.tensor([0, 1, 2, 1], device=device))
    loss.backward()
    return loss


def test_compare_with_cpu_names_the_first_operator_whose_kernel_is_wrong():
    x = torch.arange(12.0).view(3, 4).to("openreg")
    with debug.compare_with_cpu():
        y = x + 1
        with pytest.raises(debug.CpuMismatchError) as caught:
            torch.ops.openreg_debug_test.scale(y)  # the planted bug
    message = str(caught.value)
    assert "openreg_debug_test::scale: output 0 12 of 12 elements differ" in message
    y_cpu = torch.arange(12.0).view(3, 4) + 1
    gap = ((y_cpu * 2 + 1e-6).double() - (y_cpu * 2).double()).abs()  # the 1e-6, rounded to float32
    where = tuple(int(k) for k in torch.unravel_index(gap.argmax(), gap.shape))
    assert f"largest difference {gap.max().item():.6g} at index {where}" in message
    assert "(tolerance: bitwise)" in message
    assert "test_debug_modes.py" in message and "torch.ops.openreg_debug_test.scale(y)  # the planted bug" in message


def test_compare_with_cpu_reports_a_device_kernel_that_accepts_what_the_cpu_refuses():
    x = torch.tensor([4.0, -1.0], device="openreg")
    with debug.compare_with_cpu(), pytest.raises(debug.CpuMismatchError) as caught:
        torch.ops.openreg_debug_test.checked_sqrt(x)
    assert str(caught.value).startswith(
        "openreg debug (compare with CPU): openreg_debug_test::checked_sqrt ran on openreg but the CPU raised "
        "ValueError: checked_sqrt: negative input"
    )


def test_compare_with_cpu_passes_a_correct_training_step_and_honours_a_tolerance():
    with debug.compare_with_cpu() as mode:
        loss = _small_training_step("openreg")
    assert mode.compared > 20  # forward and backward, every operator
    assert loss.item() == _small_training_step("cpu").item()
    x = torch.arange(4.0).to("openreg")
    with debug.compare_with_cpu(atol=1e-5):
        torch.ops.openreg_debug_test.scale(x)


def test_check_finite_names_the_operator_that_made_the_first_nan():
    x = torch.tensor([1.0, -1.0, 4.0], device="openreg")
    with debug.check_finite() as mode:
        y = x * 2
        with pytest.raises(debug.NonFiniteError) as caught:
            torch.log(y)  # the planted NaN: log(-2)
    message = str(caught.value)
    assert message.startswith(
        "openreg debug (non-finite check): aten::log produced 1 NaN and 0 Inf of 3 elements in output 0"
    )
    assert "torch.log(y)  # the planted NaN" in message
    assert mode.checked == 2
    written = r"aten::div_.Tensor produced 0 NaN and 3 Inf of 3 elements in output 0"
    with debug.check_finite(), pytest.raises(debug.NonFiniteError, match=written):
        x.abs().div_(0)


def test_check_finite_covers_the_backward_pass():
    x = torch.zeros(3, device="openreg", requires_grad=True)
    with debug.check_finite():
        y = x.sqrt().sum()  # finite: sqrt(0) = 0
        with pytest.raises(debug.NonFiniteError, match=r"aten::div.Tensor produced 0 NaN and 3 Inf of 3 elements"):
            y.backward()  # the planted Inf: sqrt's gradient at 0, on autograd's thread


def test_check_finite_passes_a_correct_training_step():
    with debug.check_finite() as mode:
        _small_training_step("openreg")
    assert mode.checked > 10


def test_stream_sanitizer_reports_a_read_without_a_wait_with_both_stacks():
    side = torch.openreg.Stream()
    with debug.stream_sanitizer():
        x = torch.ones(1000, device="openreg")  # written on the default stream
        with torch.openreg.stream(side), pytest.raises(debug.StreamSyncError) as caught:
            x * 2  # the planted race: no wait for the default stream
    message = str(caught.value)
    assert "detected a possible data race" in message
    assert f"Access by stream {side.native_handle}" in message
    assert f"Previous access by stream {torch.openreg.default_stream().native_handle}" in message
    assert "aten::mul.Tensor" in message and "aten::ones" in message
    assert "x * 2" in message and 'x = torch.ones(1000, device="openreg")' in message


def test_stream_sanitizer_accepts_a_wait_and_a_synchronization():
    side = torch.openreg.Stream()
    with debug.stream_sanitizer():
        x = torch.ones(1000, device="openreg")
        side.wait_stream(torch.openreg.current_stream())  # an event recorded and waited for
        with torch.openreg.stream(side):
            y = x * 2
        event = torch.openreg.Event()
        event.record(side)
        torch.openreg.current_stream().wait_event(event)
        z = y + x
        torch.openreg.synchronize()
        with torch.openreg.stream(side):
            z.add_(1)
    # Read on the default stream: it waits for the side stream's add_ first (without the wait the
    # read races with it, as on CUDA, and a fast read sees 3).
    torch.openreg.current_stream().wait_stream(side)
    assert z.cpu().tolist() == [4.0] * 1000


def test_stream_sanitizer_reports_a_free_without_record_stream():
    side = torch.openreg.Stream()
    with debug.stream_sanitizer():
        x = torch.ones(1000, device="openreg")
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            y = x * 2  # noqa: F841
        del x  # the planted bug: freed while the side stream may still read it
        with pytest.raises(debug.StreamSyncError) as caught:
            torch.zeros(1, device="openreg")  # a free cannot raise: the next operator reports it
    message = str(caught.value)
    assert f"was freed while stream {side.native_handle} may still be reading from it" in message
    assert "Call tensor.record_stream(stream)" in message
    assert "del x" in message and "y = x * 2" in message


def test_stream_sanitizer_accepts_record_stream():
    side = torch.openreg.Stream()
    with debug.stream_sanitizer():
        x = torch.ones(1000, device="openreg")
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            y = x * 2
        x.record_stream(side)
        del x
        torch.openreg.synchronize()
    assert y.cpu().tolist() == [2.0] * 1000


def test_injected_oom_is_the_allocators_out_of_memory_error_and_the_device_keeps_working():
    ooms = torch.openreg.memory_stats(0)["num_ooms"]
    a = torch.ones(10, device="openreg")
    with debug.inject_faults(oom_at=2):
        b = torch.ones(10, device="openreg")  # allocation 1
        with pytest.raises(torch.OutOfMemoryError) as caught:
            torch.ones(10, device="openreg")  # allocation 2
        c = torch.ones(10, device="openreg")  # allocation 3
    assert "openreg out of memory on device 0. Tried to allocate 40.00 B" not in str(caught.value)
    assert str(caught.value).startswith("openreg out of memory on device 0. Tried to allocate 0.04 KiB")
    assert "(injected: allocation 2 since torch.openreg.debug.inject_faults(oom_at=2))" in str(caught.value)
    assert torch.openreg.memory_stats(0)["num_ooms"] == ooms + 1
    assert (a + b + c).cpu().tolist() == [3.0] * 10


def test_injected_kernel_failure_poisons_its_result_like_a_real_one():
    x = torch.arange(6.0).to("openreg")
    with debug.inject_faults(kernel_at=2):
        a = x + 1  # kernel 1
        b = a * 2  # kernel 2: fails on the device
        c = b - 1  # reads poison: fails the same way
        d = a - 1  # independent: runs
    failure = (
        r"a task failed on device 0: aten::mul.Tensor: injected kernel failure "
        r"\(kernel 2 since torch.openreg.debug.inject_faults\(kernel_at=2\)\)"
    )
    with pytest.raises(RuntimeError, match=failure):
        torch.openreg.synchronize()  # the stream's failure, reported once
    for _ in range(2):  # poison: every read of what was computed from the failed result
        with pytest.raises(RuntimeError, match=failure):
            c.cpu()
    assert d.cpu().tolist() == x.cpu().tolist()
    assert (x * 2).cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]


def test_a_lost_device_fails_allocations_and_kernels_and_returns_when_the_injection_ends():
    on_one = torch.ones(4, device="openreg:1")
    on_zero = torch.ones(4, device="openreg:0")
    lost = r"openreg: device 1 is lost \(injected by torch.openreg.debug.inject_faults\(lose_device=1\)\)"
    with debug.inject_faults(lose_device=1):
        with pytest.raises(RuntimeError, match=lost):
            torch.empty(4, device="openreg:1")  # an allocation: raises at the call
        on_one.mul_(2)  # a kernel: fails on the device, as a real one would
        on_zero.mul_(2)  # another device works
    with pytest.raises(RuntimeError, match=lost):
        torch.openreg.synchronize(1)
    with pytest.raises(RuntimeError, match="a task failed on device 1: aten::mul_.Tensor: " + lost):
        on_one.cpu()
    assert on_zero.cpu().tolist() == [2.0] * 4
    on_one.fill_(3)  # overwritten: no longer poisoned
    assert (on_one + torch.ones(4, device="openreg:1")).cpu().tolist() == [4.0] * 4


def test_fault_injection_arguments_are_checked():
    with pytest.raises(ValueError, match="lose_device=7 is not a device"):
        debug.set_faults(lose_device=7)
    with pytest.raises(ValueError, match="count from 1"):
        debug.set_faults(oom_at=-1)


def test_environment_variables_turn_the_modes_on_at_import():
    result = run_python(
        """
        import torch
        from torch_openreg.openreg import debug
        print(sorted(type(m).__name__ for m in debug._from_environment))
        print([m.atol for m in debug._from_environment if isinstance(m, debug.CompareWithCpuMode)])
        x = torch.tensor([-1.0], device="openreg")
        try:
            torch.sqrt(x)
        except debug.NonFiniteError as e:
            print(str(e).splitlines()[0])
        try:
            torch.empty(1, device="openreg:1")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
        """,
        env={
            "OPENREG_DEBUG_COMPARE_CPU": "atol=1e-6,rtol=0",
            "OPENREG_DEBUG_NONFINITE": "1",
            "OPENREG_STREAM_SANITIZER": "1",
            "OPENREG_FAULT_INJECTION": "lose_device=1",
        },
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "['CheckFiniteMode', 'CompareWithCpuMode', 'StreamSanitizerMode']"
    assert lines[1] == "[1e-06]"
    assert (
        lines[2] == "openreg debug (non-finite check): aten::sqrt produced 1 NaN and 0 Inf of 1 elements in output 0."
    )
    assert lines[3].startswith(
        "openreg: device 1 is lost (injected by torch.openreg.debug.inject_faults(lose_device=1))"
    )


def test_a_malformed_environment_variable_is_refused_naming_it(monkeypatch):
    monkeypatch.setenv("OPENREG_FAULT_INJECTION", "oom=3")
    with pytest.raises(ValueError, match="invalid OPENREG_FAULT_INJECTION='oom=3': 'oom=3' is not one of oom_at="):
        debug._enable_from_environment()  # what importing torch_openreg runs


@pytest.mark.parametrize(
    "variable, value, words",
    [("OPENREG_DEBUG_COMPARE_CPU", "atol=abc", "atol takes a number, not 'abc'"),
     ("OPENREG_FAULT_INJECTION", "oom_at=2.5", "oom_at takes a whole number, not '2.5'")],
)  # fmt: skip
def test_an_option_of_the_wrong_type_is_refused_naming_the_variable(variable, value, words):
    result = run_python("import torch_openreg", {variable: value})
    assert result.returncode != 0
    expected = f"ValueError: openreg: invalid {variable}='{value}': {words}; expected "
    assert expected in result.stderr, result.stderr[-2000:]


def test_stream_sanitizer_reports_a_bad_free_when_left_if_no_operator_follows():
    side = torch.openreg.Stream()
    with pytest.raises(debug.StreamSyncError, match="was freed while stream"):  # noqa: PT012
        with debug.stream_sanitizer():
            x = torch.ones(10, device="openreg")
            side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                x.sum()
            del x
    torch.openreg.synchronize()
