"""Results that once were silently wrong on openreg (issue 24), each against the CPU: out= views of
factories, in-place operators whose operand does not broadcast, answers that depended on the
calls seen before (a strided first call, the dtype of a Python scalar against a 0-dim tensor),
global state read when the task runs rather than at the call, and a CPU tensor as out=."""

import json

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python

DEV = "openreg"


@pytest.mark.parametrize(
    "factory",
    [
        lambda out: torch.full((4,), 7.0, out=out),
        lambda out: torch.linspace(0, 1, 4, out=out),
        lambda out: torch.logspace(0, 1, 4, out=out),
        lambda out: torch.arange(4.0, out=out),
    ],
    ids=["full", "linspace", "logspace", "arange"],
)
def test_a_factory_writes_only_the_elements_of_a_strided_out_view(factory):
    results = []
    for device in ("cpu", DEV):
        base = torch.zeros(4, 6, device=device)
        out = base[:, 3]
        factory(out)
        assert out.stride() == (6,)  # the view keeps its strides
        results.append(base.cpu())
    assert torch.equal(results[0], results[1])
    assert torch.count_nonzero(results[1][:, [0, 1, 2, 4, 5]]) == 0


@pytest.mark.parametrize("shape", [(12,), (12, 1), (3, 4), (3, 2, 2)])
def test_nonzero_into_an_out_it_must_grow_matches_the_cpu_every_time(shape):
    # Found by PyTorch's test_shape_ops: the grown out= took its values from this thread while the
    # copy of its old bytes was still queued, which then landed on them (from the second call on,
    # once the cache handed back a block that had held other data).
    torch.manual_seed(0)
    for _ in range(3):
        x = torch.randint(2, shape, device=DEV, dtype=torch.float32)
        out, expected = torch.empty([], dtype=torch.long, device=DEV), torch.empty([], dtype=torch.long)
        for device_out, source in ((out, x), (expected, x.cpu())):
            with pytest.warns(UserWarning, match="was resized"):
                torch.nonzero(source, out=device_out)
        assert torch.equal(out.cpu(), expected)
        assert out.stride() == expected.stride()  # the CPU's column-major result


def test_resize_to_the_same_size_keeps_a_views_strides():
    base = torch.zeros(3, 5, device=DEV)
    view = base[:, 1]
    view.resize_(3)
    assert view.stride() == (5,)
    view.fill_(2.0)
    expected = torch.zeros(3, 5)
    expected[:, 1] = 2.0
    assert torch.equal(base.cpu(), expected)


@pytest.mark.parametrize("op", ["pow_", "atan2_", "fmod_", "remainder_", "add_", "mul_"])
def test_an_in_place_operand_that_does_not_broadcast_raises_as_on_the_cpu(op):
    for device in ("cpu", DEV):
        base = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device)
        a = base[:2].view(2, 1)
        message = r"output with shape \[2, 1\] doesn't match the broadcast shape \[2, 3\]"
        with pytest.raises(RuntimeError, match=message):
            getattr(a, op)(torch.full((2, 3), 2.0, device=device))
        assert a.shape == (2, 1)
        assert base.untyped_storage().nbytes() == 16  # not grown
        assert torch.equal(base.cpu(), torch.tensor([1.0, 2.0, 3.0, 4.0]))


def test_in_place_operators_that_broadcast_still_run():
    for op in ("pow_", "atan2_", "fmod_", "remainder_"):
        a = torch.arange(1.0, 7.0).view(2, 3)
        b = torch.full((2, 1), 2.0)
        expected = getattr(a.clone(), op)(b)
        got = getattr(a.to(DEV), op)(b.to(DEV))
        assert torch.equal(got.cpu(), expected), op


BATCH_NORM_HISTORY = """
import json, torch
import torch.nn.functional as F

def strided(shape, seed):
    torch.manual_seed(seed)
    x = torch.randn(*shape)
    return x, torch.repeat_interleave(x, 2, dim=-1)[..., ::2]

def error(x_cpu_strided):
    x_dev = torch.repeat_interleave(x_cpu_strided[0].to("openreg"), 2, dim=-1)[..., ::2]
    assert x_dev.stride() == x_cpu_strided[1].stride()
    got = F.batch_norm(x_dev, None, None, training=True).cpu()
    want = F.batch_norm(x_cpu_strided[1], None, None, training=True)
    return (got - want).abs().max().item()

errors = {}
a = strided((4, 10), 0)
errors["strided first"] = error(a)                        # first call of the shape and operator
b = strided((6, 7), 1)
F.batch_norm(b[0].to("openreg"), None, None, training=True).cpu()  # contiguous first
errors["strided after contiguous"] = error(b)
full = torch.randn(2, 3, 4, 10)
c = full[..., ::2]                                         # 4-d, sliced (on both devices)
got = F.batch_norm(full.to("openreg")[..., ::2], None, None, training=True).cpu()
errors["4-d sliced"] = (got - F.batch_norm(c, None, None, training=True)).abs().max().item()
cl = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
got = F.batch_norm(cl.to("openreg"), None, None, training=True).cpu()
errors["channels last"] = (got - F.batch_norm(cl, None, None, training=True)).abs().max().item()
print(json.dumps(errors))
"""


def test_batch_norm_of_a_strided_input_is_right_on_its_first_call():
    # A fresh process: the first call of the shape and of the operator (traits, shape cache).
    result = run_python(BATCH_NORM_HISTORY)
    assert result.returncode == 0, result.stderr
    errors = json.loads(result.stdout.strip().splitlines()[-1])
    assert errors == dict.fromkeys(errors, 0.0), errors


def test_batch_norm_of_a_strided_input_matches_the_cpu_with_gradients():
    torch.manual_seed(3)
    x = torch.randn(5, 9)
    xs = torch.repeat_interleave(x, 2, dim=-1)[..., ::2].requires_grad_()
    xd = torch.repeat_interleave(x.to(DEV), 2, dim=-1)[..., ::2].detach().requires_grad_()
    w = torch.randn(9)
    ws, wd = w.clone().requires_grad_(), w.to(DEV).requires_grad_()
    ys = F.batch_norm(xs, None, None, ws, training=True)
    yd = F.batch_norm(xd, None, None, wd, training=True)
    assert torch.equal(yd.detach().cpu(), ys.detach())
    ys.pow(2).sum().backward()
    yd.pow(2).sum().backward()
    assert torch.equal(xd.grad.cpu(), xs.grad)
    assert torch.equal(wd.grad.cpu(), ws.grad)


@pytest.mark.parametrize("scalar_first", [True, False], ids=["scalar first", "tensor first"])
def test_the_result_dtype_of_a_python_scalar_and_a_0_dim_tensor_does_not_depend_on_history(scalar_first):
    n = 11 if scalar_first else 13  # a shape no other test uses: both calls are first calls
    values = torch.full((n,), 16777217, dtype=torch.int64)
    t = values.to(DEV)
    zero64 = torch.tensor(0.0, dtype=torch.float64)
    calls = [lambda x: x + 1.0, lambda x: x + zero64]
    if not scalar_first:
        calls.reverse()
    for call in calls:
        got, want = call(t), call(values)
        assert got.dtype == want.dtype
        assert torch.equal(got.cpu(), want)
    assert (t + zero64).dtype == torch.float64
    assert (t + 1.0).dtype == torch.float32


def test_a_0_dim_cpu_tensor_as_out_raises_as_cuda_does():
    a = torch.ones(3, device=DEV)
    out = torch.tensor(0.0)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.sum(a, dim=0, out=out)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.add(torch.tensor(1.0, device=DEV), torch.tensor(2.0, device=DEV), out=out)
    assert out.item() == 0.0
    # Read as a scalar, a 0-dim CPU tensor is still accepted.
    assert torch.equal((a * torch.tensor(2.0)).cpu(), torch.full((3,), 2.0))


@pytest.fixture
def deterministic_mode_restored():
    mode = torch.are_deterministic_algorithms_enabled()
    warn_only = torch.is_deterministic_algorithms_warn_only_enabled()
    yield
    torch.use_deterministic_algorithms(mode, warn_only=warn_only)


def put_on(device):
    x = torch.zeros(6, device=device)
    x.put_(torch.tensor([1, 4], device=device), torch.tensor([5.0, 7.0], device=device))
    return x


def test_a_kernel_queued_with_deterministic_mode_off_runs_with_it_off(deterministic_mode_restored):
    # put_ without accumulate has no deterministic implementation: the CPU kernel raises when the
    # mode is on. Queued while it is off, it ran after the host turned it on and raised.
    torch.use_deterministic_algorithms(False)
    torch.openreg._sleep(200)  # the put_ waits behind this while the mode changes
    x = put_on(DEV)
    torch.use_deterministic_algorithms(True)
    torch.openreg.synchronize()
    assert torch.are_deterministic_algorithms_enabled()  # the host's setting is back
    torch.use_deterministic_algorithms(False)
    assert torch.equal(x.cpu(), put_on("cpu"))


def test_a_call_made_in_deterministic_mode_runs_in_it(deterministic_mode_restored):
    torch.use_deterministic_algorithms(True)
    with pytest.raises(RuntimeError, match="put_ does not have a deterministic implementation"):
        put_on("cpu")
    torch.openreg._sleep(100)
    with pytest.raises(RuntimeError, match="put_ does not have a deterministic implementation"):
        put_on(DEV)  # at the call, as on the CPU: the mode could change before a queued kernel ran
    torch.use_deterministic_algorithms(False)
    torch.openreg.synchronize()
    a = torch.arange(10.0, device=DEV)
    torch.use_deterministic_algorithms(True)
    y = a.index_copy(0, torch.tensor([2, 2], device=DEV), torch.tensor([3.0, 4.0], device=DEV))
    torch.use_deterministic_algorithms(False)
    assert torch.equal(y.cpu(), torch.arange(10.0).index_copy(0, torch.tensor([2, 2]), torch.tensor([3.0, 4.0])))


@pytest.mark.parametrize("factory", [
    lambda out: torch.linspace(0, 3, 4, out=out),
    lambda out: torch.logspace(0, 3, 4, out=out),
    lambda out: torch.arange(4.0, out=out),
], ids=["linspace", "logspace", "arange"])
def test_a_sequence_into_an_out_of_the_right_count_keeps_its_shape(factory):
    # Found by PyTorch's test_linspace: the Meta kernel resizes the out to 1-d, the CPU keeps a
    # 2x2 view of 4 elements (Note [Sequence factories keep their out's shape]).
    results = []
    for device in ("cpu", DEV):
        base = torch.zeros(2, 3, device=device)
        out = base.narrow(1, 1, 2)
        factory(out)
        assert out.shape == (2, 2) and out.stride() == (3, 1)
        results.append(base.cpu())
    assert torch.equal(results[0], results[1])


@pytest.mark.parametrize("call", [
    lambda x: x[:-1].add_(x[1:]),
    lambda x: torch.add(x[1:], 1, out=x[:-1]),
    lambda x: x[1:].index_add_(0, torch.tensor([0, 1], device=x.device), x[:2]),
    lambda x: torch.rand(1, device=x.device).expand(4).put_(torch.tensor([0], device=x.device), x[:1]),
], ids=["add_", "add_out", "index_add_", "put_expanded"])
def test_a_written_argument_that_overlaps_an_input_is_refused_as_on_the_cpu(call):
    # Found by PyTorch's test_*_mem_overlap: openreg computed x[:-1].add_(x[1:]) silently
    # (Note [Call checks]).
    for device in ("cpu", DEV):
        x = torch.arange(4.0, device=device)
        with pytest.raises(RuntimeError, match=r"^unsupported operation: "):
            call(x)
        assert x.cpu().tolist() == [0.0, 1.0, 2.0, 3.0]
