#!/usr/bin/env python3
"""A worker of the OpInfo conformance sweep (tools/conformance.py starts it): runs samples on the
CPU and on openreg, judges each, and streams the outcomes to the parent as JSON lines.

    python tools/conformance_worker.py [--threads N] [--compile] [--max-samples N]

It reads requests on stdin, one JSON line each: {"op": name, "units": [[dtype, direction], ...]}.
See docs/conformance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import sys
import time

SEED = 20240917

# The outcome of one sample, best first. A pass is bitwise, close or both-raise; a skip is left
# out of the pass rate; error, crash and wrong are failures, and "wrong" is the worst of them:
# a result returned without complaint that differs from the CPU's.
PASS = ("bitwise", "close", "both-raise")
FAILURES = ("error", "crash", "wrong")
# skipped-cpu-inductor: the compile sweep's samples that CPU Inductor itself fails (raises where
# eager does not, or differs from eager beyond tolerance): not openreg's to pass.
SKIPS = ("skipped-nondeterministic", "skipped-no-grad", "skipped-cpu-inductor")
CATEGORIES = PASS + SKIPS + FAILURES
PATH_KEYS = ("native", "async", "sync", "copying", "compiled", "copied_bytes")  # torch.openreg.count_paths()

# Factories whose values are uninitialized memory: only their shapes and dtypes are comparable.
UNDEFINED_VALUES = {"empty", "empty_like", "empty_strided", "empty_permuted", "new_empty", "new_empty_strided"}

# Tensor arguments that live on the CPU whatever the device, by the operator's contract (as on
# CUDA): op name -> positions in sample.args. Found by making each op's samples on openreg and
# seeing which tensors the OpInfo leaves on the CPU; the others (narrow's start, an index of
# __getitem__ or index_put) work on either device, so they move.
HOST_ARGUMENTS = {"tensor_split": (0,)}  # tensor_indices_or_sections


# [marker: sample-replica]
def place(op, sample, device: str) -> tuple:
    """The sample's (input, args, kwargs) for a run on `device`: replicas of every tensor, but
    for the op's host arguments, which stay on the CPU."""
    import torch

    input, args, kwargs = replicate((sample.input, sample.args, sample.kwargs), device)
    for position in HOST_ARGUMENTS.get(op.name, ()):
        if position < len(args) and isinstance(args[position], torch.Tensor):
            args = (*args[:position], replicate(sample.args[position], "cpu"), *args[position + 1:])
    return input, args, kwargs


def replicate(value, device: str):
    """An independent copy of a sample argument on `device`: tensors keep values, sizes, strides,
    storage offset and requires_grad (as leaves); CPU devices in arguments become `device`."""
    import torch

    if isinstance(value, torch.Tensor):
        return _replicate_tensor(value, device)
    if isinstance(value, torch.device) and value.type == "cpu":
        return torch.device(device)
    if isinstance(value, str) and (value == "cpu" or value.startswith("cpu:")):
        return device
    if isinstance(value, (list, tuple)):
        items = [replicate(v, device) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, dict):
        return {k: replicate(v, device) for k, v in value.items()}
    return value


def _replicate_tensor(t, device: str):
    import torch

    with torch.no_grad():
        src = t.detach()
        if t.layout != torch.strided or src.is_contiguous() or src.is_conj() or src.is_neg():
            copy = src.to(device, copy=True)
        else:
            # Copy the whole storage, then view it as the original does: transposed, expanded,
            # offset views reach openreg's kernels with the strides the CPU kernel saw.
            extent = src.untyped_storage().nbytes() // src.element_size()
            storage = src.as_strided((extent,), (1,), 0).to(device, copy=True)
            copy = storage.as_strided(src.shape, src.stride(), src.storage_offset()).detach()
    return copy.requires_grad_(t.requires_grad)


def tensors_in(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


@dataclasses.dataclass
class Outcome:
    """One run of a sample on one device: the results on the CPU, or what the call raised."""
    value: object = None
    error: str | None = None
    grad_outputs: list | None = None   # backward only: the cotangents used (made on the first run)
    paths: dict | None = None          # openreg only: ledger counts of the call
    no_gradient: bool = False          # backward only: no output or input requires grad


def short(text: str, limit: int = 220) -> str:
    """One line: an exception's or assert_close's message with its blank lines squeezed out."""
    line = " ".join(part.strip() for part in str(text).strip().splitlines() if part.strip())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def describe(error: BaseException) -> str:
    return short(f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}")


def call(op, sample, device: str, direction: str, grad_outputs=None, compiled: bool = False) -> Outcome:
    """Runs the op on a fresh replica of `sample` on `device`, seeded, and returns its results on
    the CPU: the outputs (forward) or the gradients of the inputs that require grad (backward).
    `compiled`: the op's function through torch.compile (Inductor), one compiled function per op
    and device, so that later samples reuse or extend its graphs as user code would."""
    import torch

    on_openreg = device != "cpu"
    outcome = Outcome(grad_outputs=grad_outputs)
    paths: dict = {}
    try:
        args = place(op, sample, device)
        # A sample with no tensor is a factory call: openreg's run makes it on openreg.
        default_device = torch.device(device) if on_openreg and not tensors_in(args) else contextlib.nullcontext()
        with torch.openreg.count_paths() as paths, default_device:
            seed_generators(on_openreg)
            fn = _compiled(op, device) if compiled else op
            result = fn(args[0], *args[1], **args[2])
            if direction == "backward":
                result = _gradients(sample, result, tensors_in(args), device, outcome)
            if on_openreg:
                torch.openreg.synchronize()  # a kernel error surfaces here, with this sample
        if on_openreg:
            outcome.paths = paths
            outcome.value = _to_cpu(result)
        else:
            outcome.value = result
    except _NoGradient:
        outcome.no_gradient = True
    except Exception as error:  # noqa: BLE001  every failure is data here
        outcome.error = describe(error)
        if on_openreg:
            outcome.paths = paths
            _drain_device_errors()
    return outcome


_COMPILED: dict = {}


def _compiled(op, device: str):
    import torch

    key = (op.full_name, device)
    if key not in _COMPILED:
        _COMPILED[key] = torch.compile(op.op)
    return _COMPILED[key]


# [marker: seeding]
def seed_generators(on_openreg: bool) -> None:
    """Every run starts from the same seed, so random operators are compared too: openreg's
    generators equal the CPU's for the same seed. For the openreg run the CPU's own generator
    gets another seed, so an openreg operator that draws from the CPU generator shows up as wrong
    instead of matching by luck."""
    import torch

    torch.manual_seed(SEED)  # the CPU and every openreg device
    if on_openreg:
        torch.random.default_generator.manual_seed(SEED + 1)


def _gradients(sample, result, inputs, device: str, outcome: Outcome):
    import torch

    outputs = [t for t in tensors_in(sample.output_process_fn_grad(result)) if t.requires_grad]
    inputs = [t for t in inputs if t.requires_grad]
    if not outputs or not inputs:
        raise _NoGradient("no output or input requires grad")
    if outcome.grad_outputs is None:  # first run, on the CPU: fixed cotangents, seeded
        generator = torch.Generator().manual_seed(SEED)
        outcome.grad_outputs = [torch.randn(o.shape, dtype=o.dtype, generator=generator) for o in outputs]
    grad_outputs = [g.to(device) for g in outcome.grad_outputs]
    return torch.autograd.grad(outputs, inputs, grad_outputs, allow_unused=True)


class _NoGradient(Exception):
    """A backward sample with nothing to differentiate: skipped, not compared."""


def _to_cpu(value):
    import torch

    if isinstance(value, torch.Tensor):
        if value.device.type != "openreg":
            raise WrongDeviceError(f"a result is on {value.device}, not on openreg")
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        items = [_to_cpu(v) for v in value]
        return type(value)(items) if not hasattr(value, "_fields") else type(value)(*items)
    if isinstance(value, dict):
        return {k: _to_cpu(v) for k, v in value.items()}
    return value


class WrongDeviceError(Exception):
    """An openreg call returned a tensor on another device."""


def _drain_device_errors() -> None:
    import torch

    try:  # a failed task reports once, at the next synchronization: take it here, not later
        torch.openreg.synchronize()
    except Exception:  # noqa: BLE001
        pass


# [marker: compare]
def compare(expected, actual) -> tuple[str, str | None]:
    """'bitwise' (torch.equal with NaNs equal, same dtypes and shapes), 'close' (within
    assert_close's default tolerances for the dtype), else ('wrong', the mismatch)."""
    from torch.testing import assert_close

    try:
        assert_close(actual, expected, rtol=0, atol=0, equal_nan=True, check_device=False)
        return "bitwise", None
    except AssertionError:
        pass
    except Exception as error:  # noqa: BLE001  outputs assert_close cannot compare
        try:
            same = bool(actual == expected)
        except Exception:  # noqa: BLE001
            same = False
        return ("bitwise", None) if same else ("wrong", describe(error))
    try:
        assert_close(actual, expected, equal_nan=True, check_device=False)
        return "close", None
    except AssertionError as error:
        return "wrong", short(error)


def metadata(value):
    """Shapes and dtypes only, for results whose values are not reproducible."""
    import torch
    from torch.utils._pytree import tree_map

    return tree_map(lambda v: (tuple(v.shape), v.dtype) if isinstance(v, torch.Tensor) else type(v), value)


# [marker: classify]
def classify(op, sample, direction: str) -> tuple[str, str | None, dict]:
    """Runs one sample on the CPU and on openreg (and again on the CPU when the two differ);
    returns (category, reason, the paths openreg took)."""
    cpu = call(op, sample, "cpu", direction)
    if cpu.no_gradient:
        return "skipped-no-grad", "no output or input of the sample requires grad", {}
    device = call(op, sample, "openreg", direction, cpu.grad_outputs)
    paths = device.paths or {}
    if cpu.error and device.error:
        return "both-raise", None, paths
    if device.error:
        return "error", device.error, paths
    if cpu.error:
        return "error", short(f"openreg returned, but the CPU raised {cpu.error}"), paths
    if op.name in UNDEFINED_VALUES:
        category, reason = "skipped-nondeterministic", "values are uninitialized memory"
    else:
        category, reason = compare(cpu.value, device.value)
    if category != "bitwise":
        # Before blaming openreg: does the CPU itself give the same result twice?
        again = call(op, sample, "cpu", direction, cpu.grad_outputs)
        if again.error or compare(cpu.value, again.value)[0] != "bitwise":
            category = "skipped-nondeterministic"
            reason = "the CPU's own results differ between two runs with the same seed"
        if category == "skipped-nondeterministic" and metadata(cpu.value) != metadata(device.value):
            category, reason = "wrong", "shapes or dtypes differ from the CPU's (values not reproducible)"
    return category, reason, paths


# [marker: classify-compiled]
def classify_compiled(op, sample) -> tuple[str, str | None, dict]:
    """The compile sweep's judgement of one forward sample: the op compiled for openreg against
    the op run eagerly on the CPU, counted only where the op compiled for the CPU passes the same
    judgement (else skipped-cpu-inductor)."""
    expected = call(op, sample, "cpu", "forward")
    cpu = call(op, sample, "cpu", "forward", compiled=True)
    if op.name in UNDEFINED_VALUES:
        return "skipped-nondeterministic", "values are uninitialized memory", {}
    if bool(expected.error) != bool(cpu.error):
        return "skipped-cpu-inductor", short(f"CPU Inductor: {cpu.error or 'returned where eager raised'}"), {}
    if not expected.error and compare(expected.value, cpu.value)[0] == "wrong":
        return "skipped-cpu-inductor", "CPU Inductor differs from eager CPU", {}
    device = call(op, sample, "openreg", "forward", compiled=True)
    paths = device.paths or {}
    if expected.error and device.error:
        return "both-raise", None, paths
    if device.error:
        return "error", device.error, paths
    if expected.error:
        return "error", short(f"openreg returned, but the CPU raised {expected.error}"), paths
    category, reason = compare(expected.value, device.value)
    if category == "wrong" and metadata(expected.value) == metadata(device.value):
        # Random operators draw from Inductor's own generator when compiled: not comparable.
        again = call(op, sample, "cpu", "forward", compiled=True)
        if again.error or compare(cpu.value, again.value)[0] != "bitwise":
            category, reason = "skipped-nondeterministic", "CPU Inductor's own results differ between two runs"
    return category, reason, paths


# [marker: worker]
def worker_main(threads: int, compiled: bool = False, max_samples: int = 0) -> None:
    """Serves requests read from stdin, one JSON line each: {"op": name, "units": [[dtype,
    direction], ...]}. Writes events as JSON lines on the original stdout: ready, then per unit
    `unit`, one `sample` per sample (its category, reason, paths), perhaps a `note`; `idle` when
    the request is done."""
    channel = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what an operator prints goes to stderr, never into the protocol
    sys.stdout = sys.stderr
    import warnings

    warnings.simplefilter("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    import torch_openreg  # noqa: F401  (explicit: works with autoload disabled too)

    torch.set_num_threads(threads)
    if compiled:  # every sample compiles: no silent fallback to eager after a few recompilations
        torch._dynamo.config.recompile_limit = 1_000_000
        torch._dynamo.config.accumulated_recompile_limit = 1_000_000
    ops = {op.full_name: op for op in op_db}

    def emit(**event) -> None:
        channel.write(json.dumps(event) + "\n")

    emit(event="ready")
    for line in sys.stdin:
        request = json.loads(line)
        op = ops[request["op"]]
        if compiled:
            # A fresh Dynamo state per op. Without it, most ops of the whole database ran eagerly
            # inside torch.compile (406 compiled-kernel launches instead of 3,017; docs/compile.md).
            torch._dynamo.reset()
            _COMPILED.clear()
        for dtype_name, direction in request["units"]:
            emit(event="unit", dtype=dtype_name, direction=direction)
            run_unit(op, getattr(torch, dtype_name), direction, emit, compiled, max_samples)
        emit(event="idle")


def run_unit(op, dtype, direction: str, emit, compiled: bool = False, max_samples: int = 0) -> None:
    _injected_fault(op.full_name)
    samples = iter(op.sample_inputs("cpu", dtype, requires_grad=direction == "backward"))
    index = 0
    while not max_samples or index < max_samples:
        try:
            sample = next(samples)
        except StopIteration:
            return
        except Exception as error:  # noqa: BLE001  an OpInfo that cannot make its samples
            emit(event="note", reason=short(f"sample_inputs raised {describe(error)}"))
            return
        category, reason, paths = classify_compiled(op, sample) if compiled else classify(op, sample, direction)
        emit(event="sample", index=index, category=category, reason=reason, paths=paths,
             input=short(sample.summary(), 400) if category in FAILURES else None)
        index += 1


def _injected_fault(op_name: str) -> None:
    """For the sweep's own tests: OPENREG_CONFORMANCE_FAULT="abs=crash,exp=hang" makes a worker
    abort, or stop making progress, when it reaches that op."""
    faults = dict(item.split("=") for item in os.environ.get("OPENREG_CONFORMANCE_FAULT", "").split(",") if item)
    if faults.get(op_name) == "crash":
        os.abort()
    if faults.get(op_name) == "hang":
        time.sleep(3600)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a worker of tools/conformance.py")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--compile", action="store_true", help="the compile sweep (classify_compiled)")
    parser.add_argument("--max-samples", type=int, default=0, help="samples per unit at most (0: all)")
    arguments = parser.parse_args()
    worker_main(arguments.threads, arguments.compile, arguments.max_samples)
