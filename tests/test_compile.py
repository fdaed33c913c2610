"""torch.compile on openreg: Inductor's C++ kernels launched on the device's streams (docs/compile.md).

Compiling is slow on two cores, so the compiled functions are built once per module and shared by
the tests that call them; the CPU, compiled and eager, is the oracle.
"""

import functools
import os
import sys
import time
from pathlib import Path

import pytest
import torch
import torch._dynamo
import torch.nn.functional as F
from torch._dynamo.testing import CompileCounterWithBackend

from conftest import run_python
from torch_openreg._compile import patches
from torch_openreg._compile.device_interface import OpenRegInterface

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))  # models.py, hf_models.py
import models

torch._dynamo.config.cache_size_limit = 64


def softmax_scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """A pointwise producer fused into reductions (max, sum) and a pointwise epilogue: the kernel
    shape that needs Note [Inductor's CPU-only guards]."""
    return torch.softmax(x * 2.0 + y, dim=-1) + 1.0


@functools.cache
def compiled(device_type: str, fn=softmax_scaled, **options):
    """One compiled function per (device type, function, options) for the whole module."""
    del device_type  # part of the cache key: CPU and openreg compile separately
    return torch.compile(fn, **options)


def inputs(device: str, rows: int = 64, cols: int = 33):
    torch.manual_seed(0)
    x, y = torch.randn(rows, cols), torch.randn(rows, cols)
    return x.to(device), y.to(device)


# ------------------------------------------------------------------------------------------------
# Registration


def test_device_interface_answers_from_torch_openreg():
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("openreg")
    assert iface is OpenRegInterface and get_interface_for_device("openreg:1") is OpenRegInterface
    assert iface.is_available() and iface.device_count() == torch.openreg.device_count()
    props = iface.get_device_properties(1)
    assert props.multi_processor_count >= 1
    assert props.total_memory == torch.openreg.get_device_properties(1).total_memory
    assert iface.Worker.get_device_properties("openreg:1") == props
    with iface.device(1):
        assert iface.current_device() == 1
        stream = iface.Stream()
        with iface.stream(stream):
            assert iface.current_stream() == stream
            assert iface.get_raw_stream(1) == stream.stream_id != 0
        assert iface.get_raw_stream(1) == torch.openreg.default_stream(1).stream_id
    assert iface.current_device() == 0
    assert iface.exchange_device(1) == 0 and iface.exchange_device(0) == 1
    from conftest import settled_memory

    with settled_memory():
        before = iface.memory_allocated(0)
        kept = torch.empty(1024, device="openreg")
        assert iface.memory_allocated(0) - before == kept.nbytes == 4096
    event = iface.Event()
    event.record()
    iface.synchronize(0)
    assert event.query()


def test_backend_openreg_is_listed():
    assert "openreg" in torch._dynamo.list_backends()


# ------------------------------------------------------------------------------------------------
# Correctness against the CPU


def test_compiled_kernels_equal_cpu_compiled_bitwise_and_count_in_the_ledger():
    x, y = inputs("openreg")
    cx, cy = inputs("cpu")
    expected = compiled("cpu")(cx, cy)
    with torch.openreg.count_paths() as paths:
        got = compiled("openreg")(x, y)
    assert got.device == x.device and got.dtype == torch.float32 and got.shape == x.shape
    assert torch.equal(got.cpu(), expected)  # the same generated C++ on the same bytes
    torch.testing.assert_close(got.cpu(), softmax_scaled(cx, cy))  # and eager CPU, within tolerance
    assert paths["compiled"] >= 1 and paths["sync"] == 0 and paths["copying"] == 0, paths


def test_extern_kernels_run_through_the_engine():
    def linear_gelu(x, w, b):
        return F.gelu(x @ w + b)

    torch.manual_seed(0)
    args = [torch.randn(16, 32), torch.randn(32, 8), torch.randn(8)]
    expected = compiled("cpu", linear_gelu)(*args)
    with torch.openreg.count_paths() as paths:
        got = compiled("openreg", linear_gelu)(*(a.to("openreg") for a in args))
    assert torch.equal(got.cpu(), expected)
    assert paths["async"] >= 1 and paths["compiled"] >= 1 and paths["copying"] == 0, paths


def test_a_graph_with_cpu_and_openreg_kernels_launches_only_openreg_ones():
    """The graph has a CPU kernel (the multiply after .cpu()) beside the openreg one: only the
    openreg one is a stream task, and neither is taken for the other."""

    def mixed(x):
        y = torch.sin(x)
        return y.cpu() * 2, y * 2

    x, _ = inputs("openreg", 4, 4)
    cx, _ = inputs("cpu", 4, 4)
    with torch.openreg.count_paths() as paths:
        on_cpu, on_device = compiled("openreg", mixed)(x)
    assert on_cpu.device.type == "cpu" and on_device.device == x.device
    torch.testing.assert_close(on_cpu, mixed(cx)[0])
    torch.testing.assert_close(on_device.cpu(), mixed(cx)[1])
    assert paths["compiled"] == 1, paths  # sin and y * 2, fused; the CPU kernel is not counted


def test_offset_and_strided_views_reach_kernels_through_their_own_addresses():
    base = torch.randn(40, 66)
    cx, cy = base[3:35, 1::2], base[5:37, ::2]  # offsets into one storage, column stride 2
    dev = base.to("openreg")
    x, y = dev[3:35, 1::2], dev[5:37, ::2]
    fn = compiled("any", softmax_scaled, dynamic=False)
    # Close, not bitwise: for these strides CPU Inductor vectorizes the reduction differently
    # (docs/compile.md, "Correctness"); a wrong offset or stride would be far off.
    torch.testing.assert_close(fn(x, y).cpu(), fn(cx, cy), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fn(x, y).cpu(), softmax_scaled(cx, cy))


def test_dynamic_shapes_one_graph_many_sizes():
    counter = CompileCounterWithBackend("inductor")
    fn = torch.compile(softmax_scaled, backend=counter, dynamic=True)
    for rows, cols in ((5, 7), (9, 30), (17, 3)):
        x, y = inputs("openreg", rows, cols)
        cx, cy = inputs("cpu", rows, cols)
        torch.testing.assert_close(fn(x, y).cpu(), softmax_scaled(cx, cy))
    assert counter.frame_count == 1


def test_python_floats_reach_kernels_as_cpu_scalars():
    """With dynamic=True a Python float is a graph input, a 0-dim CPU float64 tensor: the launcher
    clones it for the task (Note [Compiled kernel launch])."""

    def scaled(x, alpha: float):
        return torch.tanh(x * alpha) - alpha

    fn = compiled("openreg", scaled, dynamic=True)
    x, _ = inputs("openreg", 8, 8)
    cx, _ = inputs("cpu", 8, 8)
    for alpha in (0.5, -1.25):
        torch.testing.assert_close(fn(x, alpha).cpu(), scaled(cx, alpha), rtol=0, atol=1e-6)


def test_graph_breaks_compile_each_piece_for_openreg():
    counter = CompileCounterWithBackend("inductor")

    def broken(x):
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()
        return torch.cos(y) + y.sum()

    x, _ = inputs("openreg", 6, 10)
    cx, _ = inputs("cpu", 6, 10)
    got = torch.compile(broken, backend=counter)(x)
    assert counter.frame_count == 2
    torch.testing.assert_close(got.cpu(), broken(cx))


def test_recompiles_for_the_other_device_and_runs_on_its_stream():
    counter = CompileCounterWithBackend("inductor")
    fn = torch.compile(softmax_scaled, backend=counter)
    cx, cy = inputs("cpu")
    expected = compiled("cpu")(cx, cy)
    assert torch.equal(fn(*inputs("openreg:0")).cpu(), expected)
    x1, y1 = inputs("openreg:1")
    assert torch.equal(fn(x1, y1).cpu(), expected)  # compiles again, for openreg:1
    assert counter.frame_count == 2
    torch.openreg._sleep(300)  # device 0's stream is busy; device 1's is not yet
    with torch.openreg.device(1):
        torch.openreg._sleep(300)
        got = fn(x1, y1)
        assert not torch.openreg.current_stream(1).query()  # queued behind device 1's sleep
    assert got.device == torch.device("openreg:1") and counter.frame_count == 2
    assert torch.equal(got.cpu(), expected)


def test_compile_under_autocast_matches_eager_autocast():
    def mlp(x, w1, w2):
        return torch.relu(x @ w1) @ w2

    def run(*args):
        with torch.autocast("openreg", dtype=torch.bfloat16):
            return mlp(*args)

    torch.manual_seed(0)
    args = [t.to("openreg") for t in (torch.randn(8, 16), torch.randn(16, 16), torch.randn(16, 4))]
    got = compiled("openreg", run)(*args)
    eager = run(*args)
    assert got.dtype == eager.dtype == torch.bfloat16 and got.device == eager.device
    torch.testing.assert_close(got.cpu(), eager.cpu())


# ------------------------------------------------------------------------------------------------
# Asynchrony


def test_a_compiled_call_returns_while_its_stream_is_busy():
    x, y = inputs("openreg")
    fn = compiled("openreg")
    fn(x, y)  # compiled already, or now
    torch.openreg._sleep(500)
    got = fn(x, y)
    # Had the call waited for the stream, the sleep and the kernel would be done by now.
    assert not torch.openreg.current_stream().query()  # the kernel is queued behind the sleep
    assert torch.equal(got.cpu(), compiled("cpu")(*inputs("cpu")))


def test_compiled_kernels_follow_the_current_stream_and_events():
    x, y = inputs("openreg")
    fn = compiled("openreg")
    fn(x, y)
    torch.openreg.synchronize()  # the default stream is idle from here on, unless a kernel lands there
    side = torch.openreg.Stream()
    with torch.openreg.stream(side):
        torch.openreg._sleep(300)
        got = fn(x, y)
        done = torch.openreg.Event()
        done.record()
    assert torch.openreg.default_stream().query()  # nothing was queued on the default stream
    assert not side.query()
    torch.openreg.current_stream().wait_event(done)
    total = got.sum()  # on the default stream, ordered after the kernel by the event
    got.record_stream(torch.openreg.current_stream())
    expected = compiled("cpu")(*inputs("cpu"))
    assert torch.equal(got.cpu(), expected)
    torch.testing.assert_close(total.cpu(), expected.sum())


# ------------------------------------------------------------------------------------------------
# Training through AOTAutograd, and a compiled optimizer step


def test_compiled_training_step_follows_cpu_compiled():
    """bench/models.py's MLP step compiled whole: Dynamo breaks the graph at backward(), so the
    forward and backward are compiled through AOTAutograd and the optimizer step is compiled too."""
    steps = {}
    for device in ("cpu", "openreg"):
        step = models.mlp(device)
        steps[device] = torch.compile(step)
    with torch.openreg.count_paths() as paths:
        losses = {device: [steps[device]().item() for _ in range(3)] for device in steps}
    assert losses["openreg"] == losses["cpu"], losses
    assert losses["cpu"][2] < losses["cpu"][0]
    assert paths["compiled"] > 0 and paths["copying"] == 0, paths


# The long cases: `make test-compile-long` (each compiles for minutes on two cores).
long_case = pytest.mark.skipif(not os.environ.get("OPENREG_COMPILE_LONG"), reason="make test-compile-long")


def _compiled_training_matches_cpu(build, steps: int = 3) -> dict:
    losses = {}
    for device in ("cpu", "openreg"):
        step = torch.compile(build(device))
        losses[device] = [step().item() for _ in range(steps)]
    torch.testing.assert_close(losses["openreg"], losses["cpu"], rtol=1e-5, atol=1e-6)
    assert losses["cpu"][-1] < losses["cpu"][0]
    return losses


@long_case
@pytest.mark.parametrize("build", [models.cnn, models.transformer_lm], ids=["cnn", "transformer_lm"])
def test_long_compiled_training_follows_cpu_compiled(build):
    """CPU Inductor takes oneDNN-fused convolutions that openreg graphs do not (Inductor's
    CPU-only lowerings), so the CNN's losses agree to rounding; the rest of the graph is the same
    code."""
    with torch.openreg.count_paths() as paths:
        _compiled_training_matches_cpu(build)
    assert paths["compiled"] > 0 and paths["copying"] == 0, paths


@long_case
def test_long_compiled_gpt2_training_from_a_transformers_config_follows_cpu_compiled():
    pytest.importorskip("transformers")
    import hf_models

    _compiled_training_matches_cpu(hf_models.gpt2)


# ------------------------------------------------------------------------------------------------
# Errors


def test_a_failing_kernel_names_graph_and_kernel_and_the_device_keeps_working():
    def gather(x, index):
        return x[index] * 2

    fn = compiled("openreg", gather)
    x = torch.arange(10.0, device="openreg")
    good = torch.tensor([1, 9], device="openreg")
    assert torch.equal(fn(x, good).cpu(), torch.tensor([2.0, 18.0]))
    bad = torch.tensor([1, 10], device="openreg")
    out = fn(x, bad)  # asynchronous: the kernel fails on the worker
    with pytest.raises(RuntimeError, match=r"compiled kernel cpp_\w+ of graph \d+/\d+.*index out of bounds"):
        out.cpu()
    torch.openreg.synchronize()  # the failure has been reported: the device goes on
    assert torch.equal(fn(x, good).cpu(), torch.tensor([2.0, 18.0]))


def test_a_kernel_that_fails_to_build_names_graph_and_kernel_and_the_device_keeps_working(tmp_path):
    # A compiler that refuses openreg's kernels (their source holds the trampoline) and builds
    # everything else with g++, as a compiler bug or a bad flag would.
    compiler = tmp_path / "c++"
    compiler.write_text(
        "#!/bin/sh\n"
        'for a in "$@"; do case "$a" in *.cpp) if grep -q openreg_trampoline "$a"; then\n'
        '  echo "$a: error: planted by the test" >&2; exit 1; fi;; esac; done\n'
        'exec g++ "$@"\n'
    )
    compiler.chmod(0o755)
    # A size no earlier run compiled: the kernel's source holds it, so Inductor's caches miss.
    n = 1000 + (os.getpid() * 7919 + time.time_ns()) % 1_000_000
    x = torch.rand(n, device="openreg")

    def fn(t):
        return (t * 3).sin()

    torch._dynamo.reset()
    with torch._inductor.config.patch({"cpp.cxx": (None, str(compiler)), "force_disable_caches": True}):
        with pytest.raises(Exception, match=r"openreg: compiled kernel cpp_\w+ of graph \d+/\d+ failed to build"):
            torch.compile(fn, dynamic=False)(x)
    torch._dynamo.reset()
    assert torch.equal((x + 1).cpu(), x.cpu() + 1)
    assert torch.equal(torch.compile(fn, dynamic=False)(x).cpu(), compiled("cpu", fn, dynamic=False)(x.cpu()))


def test_inductor_registration_is_asked_by_inductor_from_2_15_and_hooked_on_import_before():
    """Note [Registration when Dynamo and Inductor load]: torch >= 2.15 calls the device module's
    _inductor_backend_init; older releases get the import hooks. Either way a fresh process
    compiles for openreg."""
    import torch_openreg._compile as registration
    from torch_openreg._compat import torch_before

    inductor_modules = {"torch._inductor.codegen.common", "torch._inductor.codegen.cpp", "torch._inductor.scheduler"}
    on_every_release = {"torch._dynamo", "torch._subclasses.fake_impls", "torch.distributed.tensor._random"}
    assert set(registration._HOOKS) == on_every_release | (inductor_modules if torch_before(2, 15) else set())
    result = run_python(
        """
        import torch
        from torch._inductor.codegen.common import get_scheduling_for_device
        print(get_scheduling_for_device("openreg") is None)
        x = torch.arange(6.0, device="openreg")
        print(torch.allclose(torch.compile(lambda t: (t * 2).sin())(x).cpu(), (torch.arange(6.0) * 2).sin()))
        print(get_scheduling_for_device("openreg").__name__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "True", "OpenRegScheduling"], result.stdout


@pytest.mark.parametrize("first", ["device_interface", "inductor"])
def test_registration_completes_when_a_compile_module_is_the_program_s_first_import(first):
    # Its own import of torch._dynamo or Inductor runs a hook that needs the module being imported.
    result = run_python(
        f"""
        import torch_openreg._compile.{first}
        import torch
        from torch._dynamo.device_interface import get_interface_for_device
        from torch._inductor.codegen.common import get_scheduling_for_device
        torch.openreg._inductor_backend_init()
        print(get_interface_for_device("openreg").__name__, get_scheduling_for_device("openreg").__name__)
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["OpenRegInterface", "OpenRegScheduling"], result.stdout


def test_inductor_still_names_triton_for_openreg():
    """Note [Inductor's backend of a device]: when 2.13.0's get_current_backend answers the C++
    backend for openreg by itself, this test fails and the patch should go."""
    import torch._inductor.config as inductor_config

    torch.openreg._inductor_backend_init()  # the patches, when no compilation ran before this test
    assert patches.original_get_current_backend()("openreg") == inductor_config.cuda_backend != "cpp"
    assert torch._inductor.utils.get_current_backend("openreg") == "cpp"


def test_inductor_still_needs_cpu_guard_patch():
    """Note [Inductor's CPU-only guards]: with 2.13.0's own is_cpu(), the scheduler's loop
    reindexing fails on an openreg graph. When this test fails, PyTorch no longer needs the patch."""
    from torch._inductor.scheduler import BaseSchedulerNode

    torch.openreg._inductor_backend_init()
    patched = BaseSchedulerNode.is_cpu
    BaseSchedulerNode.is_cpu = patches.original_is_cpu()
    try:
        torch._dynamo.reset()
        with torch._inductor.config.patch(force_disable_caches=True):
            with pytest.raises(Exception, match="can't multiply sequence"):
                torch.compile(softmax_scaled)(*inputs("openreg"))
    finally:
        BaseSchedulerNode.is_cpu = patched
        torch._dynamo.reset()


def _channels_last_cnn(device: str) -> torch.nn.Module:
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3)
    )
    return net.to(device).to(memory_format=torch.channels_last)


def test_a_compiled_channels_last_convolution_keeps_the_devices_layout_forward_and_backward():
    """Note [Fake convolutions answer in the CPU's layout]: the compiled graph's convolutions, and
    their gradients, come in the layout eager openreg gives (the CPU's), and the step's values follow
    eager CPU's."""
    x = torch.randn(2, 3, 16, 16).to(memory_format=torch.channels_last)
    weights = torch.randn(2, 4, 12, 12)
    results = {}
    for device, run in (("cpu", lambda net: net), ("openreg", torch.compile)):
        net = _channels_last_cnn(device)
        y = run(net)(x.to(device))
        (y * weights.to(device)).sum().backward()
        results[device] = (y, [p.grad for p in net.parameters()])
    (y_cpu, grads_cpu), (y_or, grads_or) = results["cpu"], results["openreg"]
    assert y_or.device.type == "openreg" and y_or.stride() == y_cpu.stride() == (576, 1, 48, 4)
    torch.testing.assert_close(y_or.cpu(), y_cpu, rtol=1e-5, atol=1e-5)
    for g_or, g_cpu in zip(grads_or, grads_cpu, strict=True):
        assert g_or.stride() == g_cpu.stride(), (g_or.shape, g_or.stride(), g_cpu.stride())
        torch.testing.assert_close(g_or.cpu(), g_cpu, rtol=1e-4, atol=1e-5)


def test_fake_convolution_still_needs_the_cpus_layout_patch():
    """Note [Fake convolutions answer in the CPU's layout]: PyTorch's own rule answers contiguous for
    a channels-last convolution on openreg, where the device (and the patched rule) answer
    channels-last. When this test fails, PyTorch answers in the device's layout and the patch
    should go."""
    from torch._subclasses.fake_impls import op_implementations_dict
    from torch._subclasses.fake_tensor import FakeTensorMode

    from torch_openreg._compile import fake_convolution

    op = torch.ops.aten.convolution.default
    net = _channels_last_cnn("openreg")[0]
    x = torch.randn(2, 3, 16, 16, device="openreg").to(memory_format=torch.channels_last)
    args = (x, net.weight, net.bias, [1, 1], [0, 0], [1, 1], False, [0, 0], 1)
    eager = op(*args)
    with FakeTensorMode() as mode:
        fake = [mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args]
        patched = op_implementations_dict[op](mode, op, *fake)
        original = fake_convolution.original_rule(op)(mode, op, *fake)
    assert eager.stride() == patched.stride() == (1568, 1, 112, 8)
    assert patched.device == original.device == eager.device
    assert original.stride() == (1568, 196, 14, 1)


# ------------------------------------------------------------------------------------------------
# The compile sweep, reduced (tools/conformance.py --compile; `make conformance-compile` runs it all)


def test_reduced_compile_sweep_passes_where_cpu_inductor_passes():
    tools = Path(__file__).resolve().parent.parent / "tools"
    sys.path.insert(0, str(tools))
    from torch.testing._internal.common_methods_invocations import op_db

    import conformance
    import conformance_worker

    ops = {op.full_name: op for op in op_db}
    plan = conformance.make_plan(reduced=True, compile=True)
    assert set(plan) == set(conformance.COMPILE_REDUCED)
    outcomes = []
    for name, units in plan.items():
        for dtype, direction in units:
            assert direction == "forward" and dtype in conformance.COMPILE_DTYPES
            sample = next(iter(ops[name].sample_inputs("cpu", getattr(torch, dtype))))
            category, reason, paths = conformance_worker.classify_compiled(ops[name], sample)
            outcomes.append((name, dtype, category, reason))
            # The sweep compiles, not runs eagerly: add and softmax launch a kernel Inductor made.
            if name in ("add", "softmax"):
                assert paths.get("compiled", 0) >= 1, (name, dtype, paths)
    assert all(category in conformance_worker.PASS for *_, category, _ in outcomes), outcomes
    assert len(outcomes) == sum(len(dtypes) for dtypes in conformance.COMPILE_REDUCED.values())
