"""PyTorch's catalogue of bad calls, OpInfo's error inputs, on openreg against the CPU: each call
the CPU refuses is refused on openreg with the CPU's exception type and words, at the call, and
without synchronizing: a failure an earlier task left pending is not reported in its place
(Note [Meta errors at the call] in csrc/aten/engine/CallChecks.h; docs/errors.md).

The exceptions, each with its reason, are the calls that synchronize before they can check (the
pending failure comes first there, as CUDA's sticky error would) and checks of data made in the
task."""

import re

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

# Operators whose call synchronizes the stream before the CPU kernel checks its arguments.
SYNCHRONIZING = {
    "masked_select": "a result whose size is data: the synchronizing path",
    "histogramdd": "bin edges computed from the data: the synchronizing path",
    "nn.functional.multi_margin_loss": "Meta shapes disagree with the CPU's (engine-meta-disagrees)",
    "nn.functional.multilabel_margin_loss": "Meta shapes disagree with the CPU's (engine-meta-disagrees)",
    "nn.functional.gaussian_nll_loss": "its Python composite reads the variance's values",
    "cov": "its Python composite reads the weights' values",
    "logcumsumexp": "its complex check reads a value on the host",
    "linalg.lstsq": "its driver check reads the input on the host",
    "masked_fill": "a tensor value is read on the host (.item())",
}
# (operator, error input index): refused where the CPU refuses, but by a check of data in the task:
# reported at the next synchronization, in the CPU's words.
IN_THE_TASK = {
    ("masked_fill", 1): "a Scalar that overflows self's dtype: the CPU kernel's conversion, in the task",
    ("cat", 6): "an out= that overlaps itself once resized: found by the CPU kernel after its resize",
}

OPS = [op for op in op_db if op.error_inputs_func is not None]


def pending_failure():
    """An index_select whose index is out of range: queued, it fails inside its task."""
    data = torch.arange(12.0, device="openreg").view(3, 4)
    return data.index_select(0, torch.tensor([0, 7], device="openreg"))


def is_pending_failure(error: BaseException) -> bool:
    return isinstance(error, IndexError) and "aten::index_select" in str(error)


def drain():
    try:
        torch.openreg.synchronize()
    except IndexError:
        pass


def words(error: BaseException) -> str:
    """The first line of a message, device names left out (the CPU's names cpu and meta)."""
    return DEVICE.sub("<device>", str(error).split("\n")[0])


DEVICE = re.compile(r"\b(cpu|meta|openreg(:\d+)?)\b")


def cpu_error(op, sample):
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as error:  # noqa: BLE001 - any exception is the CPU's answer
        return error
    return None


def refusal(op, sample) -> tuple[str, BaseException | None]:
    """Where openreg refuses the call: ("call", error), ("sync", error) or ("none", None)."""
    try:
        op(sample.input, *sample.args, **sample.kwargs)
    except Exception as error:  # noqa: BLE001 - any exception is openreg's answer
        return "call", error
    try:
        torch.openreg.synchronize()
    except Exception as error:  # noqa: BLE001
        return "sync", error
    return "none", None


def op_id(op) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


@pytest.mark.parametrize("op", OPS, ids=[op_id(op) for op in OPS])
def test_each_bad_call_is_refused_at_the_call_in_the_cpus_words(op):
    cpu_inputs = list(op.error_inputs("cpu"))
    device_inputs = list(op.error_inputs("openreg"))
    if len(cpu_inputs) != len(device_inputs):
        pytest.skip("the error inputs differ by device")  # dot, vdot, gather, scatter: CUDA-specific cases
    for index, (cpu_input, device_input) in enumerate(zip(cpu_inputs, device_inputs, strict=True)):
        expected = cpu_error(op, cpu_input.sample_input)
        if not isinstance(expected, cpu_input.error_type):
            continue  # the CPU does not refuse it as the catalogue says: nothing to compare with
        drain()
        pending = pending_failure()
        where, error = refusal(op, device_input.sample_input)
        assert where != "none", f"error input {index}: accepted"
        if where == "sync" or is_pending_failure(error):
            assert op.name in SYNCHRONIZING or (op.name, index) in IN_THE_TASK, (
                f"error input {index}: {where}, {error!r}: the pending failure or a later report in place of "
                f"the call's own error, {expected!r}"
            )
            drain()
            where, error = refusal(op, device_input.sample_input)  # nothing pending now
        else:
            with pytest.raises(IndexError):
                pending.cpu()  # the earlier failure is still reported, and its result unreadable
        assert type(error) is type(expected), f"error input {index}: {error!r}, the CPU's {expected!r}"
        assert words(expected) in words(error), f"error input {index}: {error!r}, the CPU's {expected!r}"
    drain()
    # The device works afterwards.
    x = torch.arange(6.0).view(2, 3)
    assert torch.equal((x.to("openreg") * 2).cpu(), x * 2)


def census() -> dict[str, int]:
    """Every error input, classified as the test sees it (docs/errors.md quotes these counts)."""
    counts = dict.fromkeys(("at the call", "synchronizing first", "in the task", "not as the catalogue says"), 0)
    counts["inputs differ by device"] = 0
    for op in OPS:
        cpu_inputs = list(op.error_inputs("cpu"))
        device_inputs = list(op.error_inputs("openreg"))
        if len(cpu_inputs) != len(device_inputs):
            counts["inputs differ by device"] += len(cpu_inputs)
            continue
        for index, (cpu_input, device_input) in enumerate(zip(cpu_inputs, device_inputs, strict=True)):
            if not isinstance(cpu_error(op, cpu_input.sample_input), cpu_input.error_type):
                counts["not as the catalogue says"] += 1
                continue
            drain()
            pending_failure()
            where, error = refusal(op, device_input.sample_input)
            if where == "call" and not is_pending_failure(error):
                counts["at the call"] += 1
            elif (op.name, index) in IN_THE_TASK:
                counts["in the task"] += 1
            else:
                counts["synchronizing first"] += 1
            drain()
    return counts


if __name__ == "__main__":
    import torch_openreg  # noqa: F401

    for kind, count in census().items():
        print(f"{count:5d}  {kind}")
