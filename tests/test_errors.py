"""The error model (docs/errors.md): no value computed by or from a failed task is ever read as
data, by any thread, stream or later kernel; kernel errors arrive as the CPU's exception, naming the
device and the operator; the device stays usable. The CPU is the oracle."""

import threading

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing._internal.common_utils import DeterministicGuard

from conftest import run_python

openreg = torch.openreg

DATA = torch.arange(12.0).view(3, 4)
BAD = torch.tensor([0, 7])  # row 7 of a 3-row tensor


def failed_result(device="openreg"):
    """An index_select whose index is out of range: it fails inside its task."""
    return DATA.to(device).index_select(0, BAD.to(device))


def drain():
    for index in range(openreg.device_count()):
        try:
            openreg.synchronize(index)
        except (RuntimeError, IndexError):
            pass


@pytest.fixture(autouse=True)
def leave_no_task_error():
    yield
    drain()


def assert_original_error(info):
    message = str(info.value)
    assert "device 0" in message and "aten::index_select" in message, message
    assert "index out of range in self" in message, message
    assert "frame #" not in message and "Exception raised from" not in message, message


def test_a_reader_on_a_stream_that_waited_for_the_failed_one_gets_the_error():
    side = openreg.Stream()
    with openreg.stream(side):
        r = failed_result()
        done = openreg.Event()
        done.record()
    openreg.current_stream().wait_event(done)  # correct use: the default stream waits
    with pytest.raises(IndexError) as info:
        r.cpu()  # used to return zeros
    assert_original_error(info)
    # The read reported the failure: the event no longer carries it (docs/errors.md, "When the
    # error state ends"), while the result stays unreadable.
    done.synchronize()
    with pytest.raises(IndexError):
        r.cpu()
    r.record_stream(side)


def test_a_reader_gets_the_error_whatever_another_thread_synchronizes():
    stop = threading.Event()

    def synchronizer():
        while not stop.is_set():
            try:
                openreg.synchronize()
            except IndexError:
                pass

    thread = threading.Thread(target=synchronizer)
    thread.start()
    silent = 0
    try:
        for _ in range(200):
            r = failed_result()
            try:
                r.cpu()
                silent += 1  # read the failed kernel's memory as data
            except IndexError:
                pass
    finally:
        stop.set()
        thread.join()
    assert silent == 0


def test_values_computed_from_a_failed_result_raise_the_original_error():
    r = failed_result()
    derived = (r * 2 + 1).sum(0)  # queued behind the failure: these kernels never run
    reads = {
        "cpu": lambda: derived.cpu(),
        "item": lambda: derived[0].item(),
        "print": lambda: str(derived),
        "synchronizing op": lambda: torch.nonzero(derived),
        "numpy": lambda: derived.cpu().numpy(),
    }
    for read in reads.values():
        with pytest.raises(IndexError) as info:
            read()
        assert_original_error(info)
    openreg.synchronize()  # the stream's report was taken by the first read...
    with pytest.raises(IndexError):
        derived.cpu()  # ...but the values stay unreadable


# Note [Meta errors at the call] (csrc/aten/engine/CallChecks.h): the call's own shape error, in
# the CPU's words and type, without synchronizing the stream, so an earlier task's pending failure
# cannot take its place; that failure is reported at the next synchronization, as before.
SHAPE_ERRORS = {
    "add": (lambda a, b: a + b, lambda: (torch.ones(3), torch.ones(4))),
    "mm": (torch.mm, lambda: (torch.ones(2, 3), torch.ones(4, 5))),
    "cat": (lambda a, b: torch.cat([a, b]), lambda: (torch.ones(2, 3), torch.ones(2, 4))),
    "index_select dim": (lambda a, b: a.index_select(5, b), lambda: (torch.ones(2, 3), torch.tensor([0]))),
    # Past 64 KiB the stand-ins are zero pages (mapped, never written), not zero-filled copies.
    "add, 8 MiB": (lambda a, b: a + b, lambda: (torch.ones(1 << 21), torch.ones(3))),
}


@pytest.mark.parametrize("name", SHAPE_ERRORS)
def test_a_shape_error_is_raised_at_the_call_while_a_failure_is_pending(name):
    op, make = SHAPE_ERRORS[name]
    cpu_args = make()
    with pytest.raises(Exception) as cpu:
        op(*cpu_args)
    device_args = [t.to("openreg") for t in cpu_args]
    openreg.synchronize()
    r = failed_result()  # queued: its failure is pending on the stream
    with pytest.raises(type(cpu.value)) as info:
        op(*device_args)
    message = str(info.value)
    assert message.startswith(str(cpu.value).split("\n")[0]), message  # the CPU's words first
    assert "on openreg:0" in message and "index out of range" not in message, message
    with pytest.raises(IndexError) as pending:  # the earlier failure, at the next synchronization
        openreg.synchronize()
    assert "aten::index_select" in str(pending.value)
    with pytest.raises(IndexError):
        r.cpu()  # its result stays unreadable


def test_a_meta_kernel_that_needs_data_leaves_the_call_to_the_cpu_kernel():
    # repeat_interleave's Meta kernel cannot size its result without the repeats' values: the
    # CPU kernel on zero stand-ins accepts the call, which then runs on the data.
    x = torch.arange(3.0)
    repeats = torch.tensor([1, 0, 2])
    got = torch.repeat_interleave(x.to("openreg"), repeats.to("openreg"))
    assert torch.equal(got.cpu(), torch.repeat_interleave(x, repeats))


def test_work_independent_of_the_failure_runs_and_overwriting_makes_data_again():
    x = torch.randn(5, 4)
    on_device = x.to("openreg")
    r = failed_result()
    y = on_device * 3  # independent of r, queued after it: it runs
    with pytest.raises(IndexError):
        y.cpu()  # a blocking copy synchronizes: it reports the stream's failure, once
    assert torch.equal(y.cpu(), x * 3)
    r.fill_(2.0)  # a kernel that writes every element: r holds data again
    assert torch.equal(r.cpu(), torch.full((2, 4), 2.0))
    s = failed_result()
    drain()  # the copy below is a synchronizing call too: it would report the failure
    s.copy_(DATA[:2])  # a copy that covers s
    assert torch.equal(s.cpu(), DATA[:2])


def test_an_in_place_update_of_a_failed_result_stays_an_error():
    r = failed_result()
    r.add_(1)  # reads the failed values: it does not run
    r[0] = 5.0  # writes only part of r
    with pytest.raises(IndexError):
        r.cpu()


def test_a_blocking_launch_raises_at_the_call_and_leaves_nothing_pending():
    result = run_python(
        """
        import torch
        x = torch.arange(12.0).view(3, 4).to("openreg")
        try:
            x.index_select(0, torch.tensor([7]).to("openreg"))
            print("no error")
        except IndexError as e:
            print("IndexError at the call:", "aten::index_select" in str(e))
        torch.openreg.synchronize()
        print((x * 2).sum().item())
        """,
        env={"OPENREG_LAUNCH_BLOCKING": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:2] == ["IndexError at the call: True", "132.0"]


@pytest.mark.parametrize(
    "call",
    [
        lambda t: t.index_select(0, torch.tensor([9]).to(t.device)),
        lambda t: torch.gather(t, 1, torch.tensor([[0, 8]]).to(t.device)),
        lambda t: F.nll_loss(t.log_softmax(1), torch.tensor([0, 1, 9]).to(t.device)),
        lambda t: F.embedding(torch.tensor([4]).to(t.device), t),
    ],
    ids=["index_select", "gather", "nll_loss", "embedding"],
)
def test_a_kernels_error_has_the_cpus_type_and_message(call):
    with pytest.raises(Exception) as cpu:
        call(DATA)
    result = call(DATA.to("openreg"))
    with pytest.raises(type(cpu.value)) as info:
        result.cpu()
    message = str(info.value)
    assert message.startswith("openreg: a task failed on device 0: aten::"), message
    cpu_message = str(cpu.value).split("\n")[0]
    assert cpu_message in message, (cpu_message, message)
    assert len(message) < 400, message  # no C++ backtrace of the worker


@pytest.mark.parametrize(
    "call, names_openreg",
    [(lambda d: torch.empty(0, 3, device=d).max(), True),
     (lambda d: torch.empty(0, device=d).min(), True),
     (lambda d: torch.empty(0, 3, device=d).argmax(), True)],
    ids=["max", "min", "argmax"],
)
def test_errors_the_cpu_raises_from_shapes_alone_are_raised_at_the_call(call, names_openreg):
    with pytest.raises(Exception) as cpu:
        call("cpu")
    with pytest.raises(type(cpu.value)) as info:
        call("openreg")
    assert str(cpu.value).split("\n")[0].split(". ")[0] in str(info.value)
    assert ("openreg" in str(info.value)) == names_openreg
    openreg.synchronize()  # nothing was left pending


def test_empty_inputs_the_cpu_accepts_still_run_asynchronously():
    x = torch.empty(0, 3, device="openreg")
    x.sum(0)  # the first call of the signature runs the CPU kernel on empty stand-ins
    with openreg.count_paths() as paths:
        got = x.sum(0)
    assert paths["async"] == 1 and paths["sync"] == 0, paths
    assert torch.equal(got.cpu(), torch.zeros(3))


# --- every native kernel under torch.inference_mode() ------------------------------------------


def native_kernel_cases():
    g = torch.Generator().manual_seed(0)
    x4 = torch.randn(2, 3, 8, 8, generator=g)
    seq = torch.randn(2, 5, 4, generator=g)
    conv = nn.Conv2d(3, 4, 3)
    lstm = nn.LSTM(4, 6, batch_first=True)
    lstm_cell, gru_cell = nn.LSTMCell(4, 6), nn.GRUCell(4, 6)
    ops = torch.ops.openreg
    bias = torch.randn(4, generator=g)
    return {
        "zeros": lambda d: torch.zeros(3, 4, device=d),
        "ones": lambda d: torch.ones(3, 4, device=d),
        "full": lambda d: torch.full((3, 4), 2.5, device=d),
        "fill_": lambda d: torch.empty(5, device=d).fill_(3.0),
        "zero_": lambda d: torch.ones(5, device=d).zero_(),
        "contiguous of a transposed view": lambda d: DATA.to(d).t().contiguous(),
        "copy_ between layouts": lambda d: torch.empty(4, 3, device=d).copy_(DATA.t().to(d)),
        "abs (dispatch stub)": lambda d: (-DATA).to(d).abs(),
        "conv2d": lambda d: conv.to(d)(x4.to(d)),
        "conv2d channels_last": lambda d: conv.to(d)(x4.to(d, memory_format=torch.channels_last)),
        "nn.LSTM": lambda d: lstm.to(d)(seq.to(d))[0],
        "LSTMCell": lambda d: lstm_cell.to(d)(seq[:, 0].to(d))[0],
        "GRUCell": lambda d: gru_cell.to(d)(seq[:, 0].to(d)),
        "layer_norm": lambda d: F.layer_norm(seq.to(d), (4,)),
        "custom_abs": lambda d: ops.custom_abs(seq.to(d)) if d != "cpu" else seq.abs(),
        "fused_bias_gelu": lambda d: ops.fused_bias_gelu(seq.to(d), bias.to(d)),
        "generic engine op": lambda d: (seq.to(d) * 2).softmax(-1),
    }


@pytest.mark.parametrize("name", list(native_kernel_cases()))
def test_every_native_kernel_runs_under_inference_mode(name):
    call = native_kernel_cases()[name]
    with torch.inference_mode():
        expected = call("cpu")
        got = call("openreg")
        assert got.device.type == "openreg"
        assert torch.equal(got.cpu(), expected)
        assert got.is_contiguous(memory_format=torch.channels_last) == expected.is_contiguous(
            memory_format=torch.channels_last
        )


def test_grad_scaler_kernels_run_under_inference_mode():
    grads = [torch.tensor([1.0, float("inf")]), torch.tensor([2.0, 4.0])]
    with torch.inference_mode():
        found = {}
        for device in ("cpu", "openreg"):
            g = [t.clone().to(device) for t in grads]
            inf = torch.zeros(1, device=device)
            torch._amp_foreach_non_finite_check_and_unscale_(g, inf, torch.full((1,), 0.5, device=device))
            found[device] = (inf.cpu(), [t.cpu() for t in g])
    assert torch.equal(found["cpu"][0], found["openreg"][0])
    assert all(torch.equal(a, b) for a, b in zip(found["cpu"][1], found["openreg"][1], strict=True))


# --- host memory behind a stalled stream --------------------------------------------------------


def test_a_stalled_stream_holds_bounded_host_memory_and_gives_it_back():
    result = run_python(
        """
        import resource, torch
        def rss_mb():
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) / 1024
        x = torch.ones(1, device="openreg")
        for _ in range(2000):
            x.add_(1)
        torch.openreg.synchronize()
        before = rss_mb()
        torch.openreg._sleep(1500)  # the stream stalls; the host keeps launching
        for _ in range(60000):
            x.add_(1)
        during = rss_mb()
        torch.openreg.synchronize()
        print(during - before, rss_mb() - before, x.item())
        """,
        env={"OPENREG_QUEUE_DEPTH": "1024"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    during, after, value = (float(v) for v in result.stdout.split())
    assert value == 62001.0
    # 60,000 queued operations at ~2 KB each would hold ~120 MB; a 1024-deep queue holds ~2 MB.
    assert during < 40 and after < 40, (during, after)


def test_an_invalid_queue_depth_is_refused_naming_the_variable():
    result = run_python(
        """
        import torch
        try:
            torch.ones(1, device="openreg")
        except RuntimeError as e:
            print(str(e).splitlines()[0])
        """,
        env={"OPENREG_QUEUE_DEPTH": "0"},
    )
    assert "OPENREG_QUEUE_DEPTH" in result.stdout, result.stdout + result.stderr


def test_a_transformer_encoder_serves_under_inference_mode_bitwise_equal_to_the_cpu():
    # What SentenceTransformer.encode() and inference servers do: embed, encode, pool, all under
    # torch.inference_mode(), with a model moved to the device inside it.
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
    encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()
    embedding = nn.Embedding(100, 32)
    ids = torch.randint(0, 100, (3, 9))
    with torch.inference_mode():
        expected = F.normalize(encoder(embedding(ids)).mean(1), dim=-1)
        encoder.to("openreg")
        embedding.to("openreg")
        got = F.normalize(encoder(embedding(ids.to("openreg"))).mean(1), dim=-1)
        assert torch.equal(got.cpu(), expected)


def test_a_check_the_meta_kernel_lacks_raises_at_the_call():
    """Note [Call checks]: index_fill_ with a complex value on a real tensor raises where the CPU
    raises, with the CPU's words, not in the task at the next synchronization."""
    x = torch.zeros(2, 2, device="openreg")
    index = torch.tensor([0], device="openreg")
    with pytest.raises(RuntimeError, match=r"^index_fill_\(\): Converting complex Scalar to non-complex type"):
        x.index_fill_(1, index, 1 + 1j)
    torch.openreg.synchronize()  # nothing was queued
    assert x.index_fill(1, index, 3.0).cpu().tolist() == [[3.0, 0.0], [3.0, 0.0]]


@pytest.mark.parametrize(
    "call",
    [
        lambda d: torch.empty(3, dtype=torch.int16, device=d).random_(-70000, 10),
        lambda d: torch.empty(3, dtype=torch.int16, device=d).random_(5, 2),
        lambda d: torch.empty(2, device=d).uniform_(1, 0),
        lambda d: torch.empty(2, device=d).normal_(0, -1),
        lambda d: torch.empty(2, device=d).bernoulli_(1.5),
        lambda d: torch.complex(torch.ones(2, device=d), torch.ones(2, dtype=torch.float64, device=d)),
        lambda d: torch.randperm(2**11 + 2, out=torch.empty(0, dtype=torch.half, device=d), device=d),
        lambda d: torch.add(torch.ones(2, dtype=torch.bool, device=d), True, alpha=1.1),
        lambda d: torch.neg(torch.ones(2, device=d), out=torch.empty(0, dtype=torch.float64, device=d)),
        lambda d: torch.amax(torch.ones(2, device=d), 0, out=torch.empty(0, dtype=torch.float64, device=d)),
        lambda d: torch.all(torch.ones(2, device=d), 0, out=torch.empty(0, device=d)),
        lambda d: torch.floor(torch.ones(2, dtype=torch.complex64, device=d)),
        lambda d: torch.argmax(torch.ones([1] * 65, device=d), dim=0),
        lambda d: torch.bucketize(torch.ones(2, device=d), torch.ones(2, 2, device=d)),
        lambda d: torch.searchsorted(torch.ones(3, device=d), torch.ones(2, device=d), side="bad"),
        lambda d: torch.searchsorted(torch.ones(3, device=d), torch.ones(2, device=d),
                                     out=torch.empty(2, dtype=torch.int64, device=d), out_int32=True),
        lambda d: torch.ones(5, 2, dtype=torch.double, device=d).index_put_(
            (torch.tensor([1], device=d),), torch.zeros(2, dtype=torch.int, device=d)),
        lambda d: torch.ones(5, 2, device=d).index_put_(
            (torch.tensor([1, 2], device=d), torch.tensor([0, 1, 1], device=d)), torch.ones(1, device=d)),
        lambda d: torch.rand([], device=d).index_put([], torch.tensor([1.0], device=d), True),
        lambda d: torch.ones(3, device=d).masked_scatter_(torch.ones(2, 3, dtype=torch.bool, device=d),
                                                          torch.ones(6, device=d)),
        lambda d: F.elu_(torch.zeros(3, device=d).expand(3, 3)),
        lambda d: F.leaky_relu_(torch.randn(4, device=d, requires_grad=True).clone(), -0.1).sum().backward(),
        lambda d: F.interpolate(torch.ones(1, 3, 4, 4, dtype=torch.int32, device=d), scale_factor=2, mode="bilinear"),
    ],
    ids=["random_bounds", "random_order", "uniform", "normal_std", "bernoulli_p", "complex_dtypes",
         "randperm_too_large", "bool_add_float_alpha", "neg_out_dtype", "amax_out_dtype",
         "all_out_not_bool", "floor_complex", "reduce_65_dims", "bucketize_2d", "searchsorted_side",
         "searchsorted_out_int32", "index_put_dtypes", "index_put_indices_broadcast",
         "index_put_value_shape", "masked_scatter_in_place_broadcast", "elu_into_expanded",
         "leaky_relu_negative_slope_backward", "upsample_of_integers"],
)
def test_argument_checks_of_the_cpu_kernel_raise_at_the_call(call):
    """Note [Call checks]: the CPU's error, raised at the call (the random operators' from the CPU
    kernel on a one-element stand-in), and nothing is queued. Found by PyTorch's tests."""
    with pytest.raises((RuntimeError, IndexError)) as cpu:
        call("cpu")
    with pytest.raises((RuntimeError, IndexError)) as device:
        call("openreg")
    assert type(device.value) is type(cpu.value)
    assert str(device.value).startswith(str(cpu.value).replace("CPU", "openreg"))
    torch.openreg.synchronize()


def test_an_expanded_tensor_the_cpu_writes_is_written_the_same():
    """fill_ and zero_ write an expanded tensor on the CPU: so do they on openreg."""
    for device in ("cpu", "openreg"):
        base = torch.zeros(3, device=device)
        base.expand(3, 3).fill_(2.0)
        assert base.cpu().tolist() == [2.0, 2.0, 2.0]


def test_a_resized_out_of_a_pointwise_operator_takes_the_cpus_layout():
    """Note [Resized outs of pointwise operators]: TensorIterator's layout, not a contiguous one."""
    x = torch.randn(2, 3, 4).permute(0, 2, 1)
    for op in (torch.add, torch.eq):
        expected = op(x, x, out=torch.empty(0, dtype=op(x, x).dtype))
        got = op(x.to("openreg"), x.to("openreg"), out=torch.empty(0, dtype=expected.dtype, device="openreg"))
        assert got.stride() == expected.stride() == (12, 1, 4)
        assert torch.equal(got.cpu(), expected)
    kept = torch.empty(2, 4, 3, device="openreg")  # the right shape: not resized, strides kept
    assert torch.exp(x.to("openreg"), out=kept).stride() == (12, 3, 1)


def test_arange_warns_in_the_cpus_words_when_it_resizes_its_out():
    import warnings

    def warned(device):
        line = torch.zeros(1, 49, device=device)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.arange(-1, 1, 2.0 / 49, dtype=torch.float32, out=line)
        return line, [str(w.message).split(" (Triggered internally")[0] for w in seen]

    (cpu_line, cpu_words), (line, words) = warned("cpu"), warned("openreg")
    assert words == cpu_words and len(words) == 1 and "will be resized to a tensor of shape (50,)" in words[0]
    assert torch.equal(line.cpu(), cpu_line)


def test_put_in_deterministic_mode_is_refused_at_the_call_and_leaves_self_readable():
    a = torch.arange(4.0, device="openreg")
    index, values = torch.tensor([0, 0], device="openreg"), torch.tensor([5.0, 6.0], device="openreg")
    with DeterministicGuard(True):
        with pytest.raises(RuntimeError, match=r"^put_ does not have a deterministic implementation"):
            a.put_(index, values)
    assert a.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]  # as the CPU leaves it; nothing failed in a task
    with DeterministicGuard(True, warn_only=True), pytest.warns(UserWarning, match="put_ does not"):
        a.put_(index, values, accumulate=False)
    assert a.cpu().tolist()[1:] == [1.0, 2.0, 3.0]


def test_a_random_call_check_moves_no_generator_and_warns_once():
    import warnings

    torch.manual_seed(3)
    expected = torch.empty(4).uniform_()
    torch.manual_seed(3)
    assert torch.equal(torch.empty(4, device="openreg").uniform_().cpu(), expected)  # the check drew nothing
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.empty(3, dtype=torch.float16, device="openreg").random_(-(2**12), 10)
        torch.openreg.synchronize()
        torch.ones(1, device="openreg").add_(1)
    assert [str(w.message)[:20] for w in seen] == ["from is out of bound"]
