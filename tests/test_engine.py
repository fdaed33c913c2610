"""The generic execution engine: any ATen operator on openreg, asynchronous, zero-copy, equal to
the CPU. CPU is the oracle: each result is compared bitwise with the same call on CPU tensors."""

import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

from conftest import run_python, settled_memory

openreg = torch.openreg


def same(a, b):
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if not isinstance(a, torch.Tensor):
        return a == b
    a = a.cpu()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    )


def to_device(value):
    if isinstance(value, torch.Tensor):
        return value.to("openreg")
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v) for v in value)
    return value


g = torch.Generator().manual_seed(0)
A = torch.randn(8, 6, generator=g)
B = torch.randn(6, 5, generator=g)
POS = torch.rand(8, 6, generator=g) + 0.1
IDX = torch.randint(0, 8, (5,), generator=g)
IMG = torch.randn(2, 3, 8, 8, generator=g)
W = torch.randn(4, 3, 3, 3, generator=g)

FUNCTIONAL = {
    "add": (torch.add, (A, A)),
    "add_scalar": (lambda x: x + 2.5, (A,)),
    "sub_alpha": (lambda x, y: torch.sub(x, y, alpha=3), (A, A.flip(0))),
    "mul_int": (torch.mul, (IDX, IDX)),
    "div": (torch.div, (A, POS)),
    "mm": (torch.mm, (A, B)),
    "matmul_batched": (torch.matmul, (A.view(2, 4, 6), B)),
    "relu": (torch.relu, (A,)),
    "sigmoid": (torch.sigmoid, (A,)),
    "tanh": (torch.tanh, (A,)),
    "exp_log": (lambda x: torch.log(torch.exp(x)), (A,)),
    "sqrt": (torch.sqrt, (POS,)),
    "pow": (torch.pow, (POS, 1.7)),
    "sum": (torch.sum, (A,)),
    "sum_dim": (lambda x: x.sum(1, keepdim=True), (A,)),
    "mean": (lambda x: x.mean(0), (A,)),
    "amax": (lambda x: x.amax(1), (A,)),
    "argmax": (lambda x: x.argmax(1), (A,)),
    "softmax": (lambda x: F.softmax(x, 1), (A,)),
    "log_softmax": (lambda x: F.log_softmax(x, 0), (A,)),
    "cat": (lambda x, y: torch.cat([x, y, x]), (A, A)),
    "stack": (lambda x: torch.stack([x, x], 1), (A,)),
    "where": (lambda x: torch.where(x > 0, x, -x), (A,)),
    "clamp": (lambda x: x.clamp(-0.5, 0.5), (A,)),
    "cumsum": (lambda x: x.cumsum(0), (A,)),
    "sort": (lambda x: torch.sort(x, 1), (A,)),
    "topk": (lambda x: torch.topk(x, 3), (A,)),
    "max_dim": (lambda x: torch.max(x, 1), (A,)),
    "gather": (lambda x, i: x.gather(0, i.view(5, 1).expand(5, 6)), (A, IDX)),
    "index_select": (lambda x, i: x.index_select(0, i), (A, IDX)),
    "embedding": (F.embedding, (IDX, A)),
    "conv2d": (F.conv2d, (IMG, W)),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), (IMG,)),
    "layer_norm": (lambda x: F.layer_norm(x, (6,)), (A,)),
    "cross_entropy": (lambda x, y: F.cross_entropy(x, y % 6), (A, IDX.repeat(2)[:8])),
    "transpose_input": (lambda x: (x.t() * 2).sum(0), (A,)),
    "slice_input": (lambda x: x[1::2, ::3] + 1, (A,)),
    "zero_size": (lambda x: x[:0] * 2, (A,)),
    "bool_ops": (lambda x: (x > 0) & (x < 1), (A,)),
    "dtype_promotion": (lambda x, i: x[:5, 0] + i, (A, IDX)),
}


@pytest.mark.parametrize("name", sorted(FUNCTIONAL))
def test_functional_operators_equal_cpu(name):
    fn, args = FUNCTIONAL[name]
    expected = fn(*args)
    with openreg.count_paths() as paths:
        actual = fn(*to_device(args))
    for result in actual if isinstance(actual, tuple) else (actual,):
        assert result.device.type == "openreg"
    assert same(tuple(actual) if isinstance(actual, tuple) else actual,
                tuple(expected) if isinstance(expected, tuple) else expected), name
    assert paths["copying"] == 0


def test_in_place_and_out_operators():
    d = A.to("openreg").clone()
    d.add_(1).mul_(A.to("openreg")).clamp_(max=1.0)
    assert same(d, ((A + 1) * A).clamp(max=1.0))
    out = torch.empty(0, device="openreg")
    torch.mm(A.to("openreg"), B.to("openreg"), out=out)  # resized from empty, as on CPU
    assert same(out, A @ B)
    values, indices = torch.empty(0, device="openreg"), torch.empty(0, dtype=torch.long, device="openreg")
    torch.max(A.to("openreg"), 1, out=(values, indices))
    assert same((values, indices), tuple(torch.max(A, 1)))


def test_operators_are_asynchronous():
    s = openreg.Stream()
    x, w = A.to("openreg"), B.to("openreg")  # blocking copies: before the sleep
    with openreg.stream(s):
        openreg._sleep(100)
        y = torch.mm(x, w).relu()  # returns before the sleep is over
        assert not s.query()
        assert y.shape == (8, 5) and y.device.type == "openreg"
    # Reading y on the default stream needs it to wait for s, as on CUDA: without the wait the
    # copy below could run before the product is computed.
    openreg.current_stream().wait_stream(s)
    assert same(y, torch.mm(A, B).relu())


def test_data_dependent_shapes_and_host_results_synchronize():
    d = A.to("openreg")
    with openreg.count_paths() as paths:
        assert same((d > 0).nonzero(), (A > 0).nonzero())
        assert same(d[d > 0.5], A[A > 0.5])
        assert same(torch.masked_select(d, d < 0), torch.masked_select(A, A < 0))
        assert same(torch.unique(IDX.to("openreg")), torch.unique(IDX))
        assert torch.equal(d, d.clone()) and not torch.equal(d, d + 1)
        assert d[0, 0].item() == A[0, 0].item()
    assert paths["sync"] >= 5 and paths["copying"] == 0


def test_random_operators_equal_cpu_for_the_same_seed():
    for fn in (lambda dev: torch.randn(4, 5, device=dev), lambda dev: torch.rand(7, device=dev),
               lambda dev: torch.randint(0, 100, (6,), device=dev),
               lambda dev: torch.empty(5, device=dev).normal_(2.0, 3.0),
               lambda dev: torch.bernoulli(torch.full((9,), 0.3, device=dev)),
               lambda dev: torch.native_dropout(torch.ones(10, device=dev), 0.5, True)):
        torch.manual_seed(21)  # seeds the CPU and every openreg device
        expected = fn("cpu")
        torch.manual_seed(21)
        assert same(fn("openreg"), expected)
    gen = torch.Generator(device="openreg").manual_seed(3)
    cpu = torch.Generator().manual_seed(3)
    assert same(torch.randn(3, generator=gen, device="openreg"), torch.randn(3, generator=cpu))
    with pytest.raises(RuntimeError, match="needs an openreg generator"):
        torch.randn(3, generator=torch.Generator(), device="openreg")


def test_shape_errors_are_raised_at_the_call():
    with pytest.raises(RuntimeError, match="must match the size"):
        A.to("openreg") + torch.ones(5, device="openreg")
    with pytest.raises(RuntimeError):
        torch.mm(A.to("openreg"), A.to("openreg"))
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        A.to("openreg") + A.to("openreg:1")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        A.to("openreg") + A


def test_kernel_errors_surface_at_the_next_synchronization():
    bad = torch.tensor([0, 99]).to("openreg")
    y = A.to("openreg").index_select(0, bad)  # the index is checked inside the kernel
    with pytest.raises(IndexError, match=r"aten::index_select.*out of range"):  # as the CPU
        openreg.synchronize()
    openreg.synchronize()  # reported once; the device keeps working
    assert same(A.to("openreg") * 2, A * 2)
    with pytest.raises(IndexError, match=r"device 0: aten::index_select.*out of range"):
        y.cpu()  # but the failed kernel's output is never read as data (docs/errors.md)
    del y


def test_launch_blocking_raises_kernel_errors_at_the_call():
    result = run_python(
        """
        import torch
        x = torch.randn(4, 3).to("openreg")
        try:
            x.index_select(0, torch.tensor([7]).to("openreg"))
        except IndexError as e:
            print("raised at the call:", "index_select" in str(e))
        """,
        env={"OPENREG_LAUNCH_BLOCKING": "1"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "raised at the call: True"


def test_fallback_policy_makes_a_copying_fallback_visible():
    a = A.to("openreg")
    with openreg.copying_fallback("aten::mm"):
        with openreg.fallback_policy("error"), openreg.count_paths() as paths:
            with pytest.raises(NotImplementedError, match=r"copying CPU fallback.*policy is 'error'"):
                a @ a.t()
        assert paths["copying"] == 0
        with openreg.fallback_policy("warn"), openreg.count_paths() as paths:
            with pytest.warns(UserWarning, match="aten::mm runs through the copying CPU fallback"):
                assert same(a @ a.t(), A @ A.t())
        assert paths["copying"] == 1
    with pytest.raises(ValueError, match="fallback policy must be one of"):
        with openreg.fallback_policy("sometimes"):
            pass


def test_training_an_mlp_matches_cpu_bitwise_without_fallbacks():
    def train(device):
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(16, 32), torch.nn.BatchNorm1d(32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
        ).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        x, y = torch.randn(64, 16, generator=gen).to(device), torch.randint(0, 4, (64,), generator=gen).to(device)
        for _ in range(5):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        return loss.item(), [p.detach().cpu() for p in model.parameters()], model[1].running_var.cpu()

    with openreg.count_paths() as paths:
        loss_o, params_o, var_o = train("openreg")
    loss_c, params_c, var_c = train("cpu")
    assert loss_o == loss_c
    assert all(same(a, b) for a, b in zip(params_o, params_c, strict=True))
    assert same(var_o, var_c)
    assert paths["copying"] == 0 and paths["async"] > 100


def test_no_cpu_kernel_is_shadowed_by_a_composite_default():
    # An operator with a CPU kernel and a CompositeExplicitAutograd kernel would run the composite
    # (a decomposition with other rounding) on openreg unless openreg registers a kernel for it.
    C = torch._C
    shadowed = [
        n for n in C._dispatch_get_all_op_names()
        if n.startswith("aten::")
        and C._dispatch_has_kernel_for_dispatch_key(n, "CPU")
        and (C._dispatch_has_kernel_for_dispatch_key(n, "CompositeExplicitAutograd")
             or C._dispatch_has_kernel_for_dispatch_key(n, "CompositeImplicitAutograd"))
        and not C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1")
    ]
    assert shadowed == []
    # The half backward of silu and mish: the CPU's own kernel, bitwise.
    x, grad = torch.randn(50, generator=g).half() * 3, torch.randn(50, generator=g).half()
    for op in (torch.ops.aten.silu_backward, torch.ops.aten.mish_backward):
        assert same(op(grad.to("openreg"), x.to("openreg")), op(grad, x))


def test_structured_operators_take_the_engine_directly():
    # Note [Structured operators on the engine]: once the device is initialized, every aten
    # operator with a CPU kernel and a CompositeExplicitAutogradNonFunctional one has an openreg
    # kernel, so no call computes its shapes on the host twice.
    C = torch._C
    openreg.init()
    composite_first = [
        n for n in C._dispatch_get_all_op_names()
        if n.startswith("aten::")
        and C._dispatch_has_kernel_for_dispatch_key(n, "CPU")
        and C._dispatch_has_kernel_for_dispatch_key(n, "CompositeExplicitAutogradNonFunctional")
        and not C._dispatch_has_kernel_for_dispatch_key(n, "PrivateUse1")
    ]
    # Linear algebra keeps the composite route (its Meta kernels' layouts differ from LAPACK's).
    assert composite_first and all(n.startswith(("aten::linalg_", "aten::_linalg_")) for n in composite_first)
    a, b = torch.randn(4, 5, generator=g), torch.randn(5, generator=g)
    x, y = a.to("openreg"), b.to("openreg")
    x.add(y)
    x.clone().mul_(y)
    z = x.clone()
    with openreg.count_paths() as paths:
        r = x.add(y, alpha=2)  # functional: the engine allocates its output
        z.mul_(y)  # in place: one task on the argument
    assert paths["async"] == 2 and paths["native"] == 0 and paths["meta_calls"] == 0, paths
    assert same(r, a.add(b, alpha=2)) and same(z, a * b)
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        y.mul_(x)  # the Meta kernel's check, at the call


def test_conjugate_and_negative_views_and_cpu_scalars():
    z = torch.randn(5, dtype=torch.complex64, generator=torch.Generator().manual_seed(4))
    d = z.to("openreg")
    assert same(torch.conj(d), torch.conj(z).resolve_conj())           # copy of a conjugate view
    assert same(torch.conj(d) * 2, torch.conj(z) * 2)                 # kernel input with the bit
    assert same(torch.conj(d).imag * 1, torch.conj(z).imag * 1)       # negative view
    assert same(torch.conj(z).to("openreg"), torch.conj(z).resolve_conj())  # host conj -> device
    assert same(d.real + torch.tensor(2.0), z.real + 2)               # CPU 0-dim scalar operand


def test_no_deadlock_when_python_owned_scalars_meet_a_waiting_host():
    # A task must not drop references to Python-visible tensors (it would need the GIL while the
    # host holds it waiting): see Note [Tasks hold no Python-visible tensor].
    expected = torch.randn(256, 256, generator=torch.Generator().manual_seed(9))
    x = expected.to("openreg")
    for i in range(200):
        scalar = torch.tensor(1.0 + i / 100)
        x.mul_(scalar).div_(scalar + 1)
        expected.mul_(scalar).div_(scalar + 1)
        del scalar
        openreg.synchronize()
    assert same(x, expected)


# Note [Shape cache]: Meta answers are remembered per call signature. A remembered answer must
# never be reused for a call that differs in anything a Meta kernel can see.
def test_the_shape_cache_answers_repeated_calls_without_the_meta_kernel():
    x = A.to("openreg")
    torch.relu(x)
    with openreg.count_paths() as paths:
        for _ in range(5):
            y = torch.relu(x)
    assert paths["async"] == 5 and paths["meta_calls"] == 0
    assert same(y, torch.relu(A))


SIGNATURE_VARIANTS = {
    "dim": (lambda x: x.sum(0), lambda x: x.sum(1)),
    "keepdim": (lambda x: x.sum(1), lambda x: x.sum(1, keepdim=True)),
    "scalar value": (lambda x: x.clamp(min=0.5), lambda x: x.clamp(min=-0.5)),
    "scalar type": (lambda x: x.long() + 2, lambda x: x.long() + 2.5),
    "string": (lambda x: torch.div(x, 0.3, rounding_mode="floor"), lambda x: torch.div(x, 0.3, rounding_mode="trunc")),
    "strides": (lambda x: torch.exp(x), lambda x: torch.exp(x.t())),
    "dtype": (lambda x: torch.exp(x), lambda x: torch.exp(x.double())),
    "size list": (lambda x: x.repeat(2, 1), lambda x: x.repeat(1, 3)),
    "cpu scalar tensor": (lambda x: x.long() * torch.tensor(3), lambda x: x.long() * torch.tensor(3.5)),
    "none vs value": (lambda x: torch.cumsum(x, 0), lambda x: torch.cumsum(x, 0, dtype=torch.float64)),
}


@pytest.mark.parametrize("name", sorted(SIGNATURE_VARIANTS))
def test_the_shape_cache_tells_signatures_apart(name):
    first, second = SIGNATURE_VARIANTS[name]
    x = A.to("openreg")
    for fn in (first, second, first, second):  # each answer is used again after the other one
        assert same(fn(x), fn(A)), name


def test_the_shape_cache_does_not_remember_errors():
    x = A.to("openreg")
    for _ in range(2):
        with pytest.raises(RuntimeError, match="size of tensor a"):
            x + torch.ones(5, device="openreg")
    for _ in range(2):  # an out= argument resized by the Meta answer, then found at its size
        out = torch.empty(0, device="openreg")
        torch.add(x, x, out=out)
        assert same(out, A + A)


def test_the_shape_cache_is_bounded_and_stays_correct():
    # More signatures than a cache holds (ShapeCache::kMaxEntries is 1024): emptied when full.
    for n in range(1, 1100):
        x = torch.arange(n, dtype=torch.float32)
        y = torch.neg(x.to("openreg"))
        assert y.shape == (n,)
    assert same(y, torch.neg(x))


# Note [C++ Meta kernels]: a call of a new signature asks ATen's C++ Meta kernel of the operator,
# not the Python one torch registers over it for the Meta key.
NEW_SHAPE_CALLS = {
    "relu": lambda x: torch.relu(x),
    "add": lambda x: x + x.t().contiguous().t(),
    "mul by a scalar": lambda x: x * 2,
    "sum over a dim": lambda x: x.sum(0),
    "mean": lambda x: x.mean(),
    "cat": lambda x: torch.cat([x, x], 1),
    "softmax": lambda x: torch.softmax(x, -1),
    "mm": lambda x: x @ x.t(),
    "permuted pointwise": lambda x: torch.exp(x.t()),
    "comparison": lambda x: x > 0,
}
PYTHON_META_FILES = ("torch/_refs/", "torch/_meta_registrations.py", "torch/_prims/", "torch/_decomp/")


def test_new_shapes_ask_atens_cpp_meta_kernels_not_pythons():
    python_meta = []

    def watch(frame, event, arg):
        if event == "call" and any(f in frame.f_code.co_filename.replace("\\", "/") for f in PYTHON_META_FILES):
            python_meta.append(frame.f_code.co_name)

    g = torch.Generator().manual_seed(3)
    for n in range(31, 37):  # sizes no other test uses: each call is a new signature
        x = torch.randn(n, 5, generator=g)
        for name, fn in NEW_SHAPE_CALLS.items():
            with openreg.count_paths() as paths:
                sys.setprofile(watch)
                try:
                    y = fn(x.to("openreg"))
                finally:
                    sys.setprofile(None)
            assert paths["meta_calls"] >= 1, name
            assert python_meta == [], f"{name}: {python_meta}"
            expected = fn(x)
            assert same(y, expected) and y.stride() == expected.stride(), name


def test_an_operator_whose_cpp_meta_kernel_announces_a_placeholder_keeps_the_cpus_shape():
    # isin of a Scalar: ATen's Meta kernel says [0], the CPU kernel resizes to [] (gen_cpp_meta.py).
    # Its .out kernel, run by the task on the engine's own output, resized that output twice and
    # warned "An output with one or more elements was resized", which the CPU's call does not.
    t = torch.tensor([1.0, 2.0, 3.0])
    for element in (2.0, 5.0):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert same(torch.isin(element, t.to("openreg")), torch.isin(element, t))
            out = torch.empty(0, dtype=torch.bool, device="openreg")
            torch.isin(element, t.to("openreg"), out=out)
            assert same(out, torch.isin(element, t))
    # A caller's out= of another shape: ATen's warning once, at the call, as on the CPU.
    for device in ("cpu", "openreg"):
        out = torch.empty(3, dtype=torch.bool, device=device)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.isin(2.0, t.to(device), out=out)
            torch.openreg.synchronize()
        assert out.shape == () and out.item() is True
        assert [str(w.message)[:47] for w in caught] == ["An output with one or more elements was resized"]


def test_the_first_call_on_the_device_does_not_import_dynamo():
    # A Python Meta kernel wrapped in torch._disable_dynamo imported torch._dynamo at its first call:
    # about a second, on the first relu of every program.
    done = run_python("""
        import sys, torch, torch_openreg
        x = torch.randn(4, 4, device="openreg")
        y = (torch.relu(x) + 1).sum(0).softmax(0)
        torch.openreg.synchronize()
        print("torch._dynamo" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]


def test_the_default_dtype_is_part_of_the_signature():
    previous = torch.get_default_dtype()
    try:
        for dtype in (torch.float64, torch.float32, torch.float64):
            torch.set_default_dtype(dtype)
            assert same(torch.linspace(0, 1, 7, device="openreg"), torch.linspace(0, 1, 7))
    finally:
        torch.set_default_dtype(previous)


# Registration scenarios (docs/operators.md): a DispatchStub kernel, a per-operator fallback.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int8, torch.complex64])
def test_abs_runs_through_its_dispatch_stub(dtype):
    x = (torch.randn(6, 5) * 10).to(dtype)
    for source in (x, x.t(), x[:, ::2], x[:0]):
        d = source.to("openreg")
        with openreg.count_paths() as paths:
            y = d.abs()
            out = torch.empty(0, dtype=y.dtype, device="openreg")
            torch.abs(d, out=out)
        assert same(y, source.abs()) and same(out, source.abs())
        assert y.stride() == source.abs().stride()
        assert paths["async"] == 0 and paths["copying"] == 0 and paths["native"] >= 2
    if not dtype.is_complex:
        d = x.to("openreg")
        d.abs_()
        assert same(d, x.abs())


# Note [Counting native calls]: one operator call a native kernel serves counts one native call,
# whatever the kernel calls on its way (its output allocation, .item()'s copy to the CPU).
# Each entry: the arguments, made outside the counted block (views and copies count too), and the
# call.
NATIVE_CALLS = {
    "empty": (lambda d: (), lambda: torch.empty(3, 4, device="openreg")),
    "empty_strided": (lambda d: (), lambda: torch.empty_strided((3, 4), (1, 3), device="openreg")),
    "view": (lambda d: (d,), lambda d: d.view(-1)),
    "as_strided": (lambda d: (d,), lambda d: d.as_strided((2, 2), (1, 2))),
    "resize_": (lambda d: (d,), lambda d: d.resize_(2, 3)),
    "fill_": (lambda d: (d,), lambda d: d.fill_(2.0)),
    "zero_": (lambda d: (d,), lambda d: d.zero_()),
    "item": (lambda d: (d[1, 2],), lambda d: d.item()),
    "copy_from_cpu": (lambda d: (d,), lambda d: d.copy_(A)),
    "copy_to_cpu": (lambda d: (d, torch.empty_like(A)), lambda d, c: c.copy_(d)),
    "cpu": (lambda d: (d,), lambda d: d.cpu()),
    "abs_out": (lambda d: (d,), lambda d: torch.abs(d, out=d)),
    "custom_abs": (lambda d: (d,), lambda d: torch.ops.openreg.custom_abs(d)),
    "layer_norm": (lambda d: (d,), lambda d: torch.native_layer_norm(d, (6,), None, None, 1e-5)),
    "convolution": (
        lambda d: (d.unsqueeze(0), d.t()[:2].unsqueeze(-1)),
        lambda x, w: torch.ops.aten.convolution_overrideable(x, w, None, [1], [0], [1], False, [0], 1),
    ),
}


@pytest.mark.parametrize("name", sorted(NATIVE_CALLS))
def test_a_native_kernel_counts_one_native_call(name):
    arguments, call = NATIVE_CALLS[name]
    args = arguments(A.to("openreg"))
    with openreg.count_paths() as paths:
        call(*args)
    assert [paths[k] for k in ("native", "async", "sync", "copying")] == [1, 0, 0, 0], dict(paths)


def test_a_native_call_inside_a_native_kernel_is_not_counted_again():
    d = A.to("openreg")
    with openreg.count_paths() as paths:
        d.sum().item()  # the engine's sum, then .item(): a blocking copy to the CPU inside
    assert paths["async"] == 1 and paths["sync"] == 0 and paths["copying"] == 0, dict(paths)
    with openreg.count_paths() as item:
        d[0, 0].item()
    with openreg.count_paths() as select:
        d[0, 0]
    assert item["native"] == select["native"] + 1, (dict(item), dict(select))


def test_operators_can_be_routed_to_the_copying_fallback_one_by_one():
    a, b = A.to("openreg"), B.to("openreg")
    with openreg.copying_fallback("aten::mm", "add.Tensor"):
        assert openreg.operators_on_copying_fallback() == ["aten::add.Tensor", "aten::mm"]
        with openreg.count_paths() as paths:
            c, d = a @ b, a + a
        assert paths["copying"] == 2 and paths["async"] == 0
        assert paths["copied_bytes"] == a.nbytes + b.nbytes + c.nbytes + 2 * a.nbytes + d.nbytes
        with openreg.fallback_policy("error"), pytest.raises(NotImplementedError, match="aten::mm"):
            a @ b
    assert same(c, A @ B) and same(d, A + A) and c.device.type == "openreg"
    assert openreg.operators_on_copying_fallback() == []
    with openreg.count_paths() as paths:
        a @ b
    assert paths["async"] == 1 and paths["copying"] == 0
    with pytest.raises(ValueError, match="no aten operator named 'aten::nope'"):
        with openreg.copying_fallback("aten::nope"):
            pass


def test_the_environment_routes_operators_to_the_copying_fallback_at_load():
    result = run_python(
        """
        import torch
        x = torch.ones(3, 3, device="openreg")
        with torch.openreg.count_paths() as paths:
            y = x @ x
        print(torch.openreg.operators_on_copying_fallback(), paths["copying"], y.sum().item())
        """,
        env={"OPENREG_COPYING_OPS": "aten::mm"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["['aten::mm']", "1", "27.0"]


# Note [Asynchronous random numbers]: random operators are stream tasks, in program order.
def test_random_operators_are_asynchronous_and_equal_cpu():
    torch.manual_seed(8)
    expected = [torch.randn(16, 4), torch.rand(9), torch.empty(7).uniform_(-1, 2),
                torch.bernoulli(torch.full((9,), 0.4))]
    torch.manual_seed(8)
    openreg._sleep(50)  # every draw below is queued behind this
    with openreg.count_paths() as paths:
        got = [torch.randn(16, 4, device="openreg"), torch.rand(9, device="openreg"),
               torch.empty(7, device="openreg").uniform_(-1, 2),
               torch.bernoulli(torch.full((9,), 0.4, device="openreg"))]
    assert paths["sync"] == 0 and paths["copying"] == 0
    assert all(same(g, e) for g, e in zip(got, expected, strict=True))


def test_random_numbers_follow_program_order_across_streams():
    torch.manual_seed(9)
    expected = [torch.randn(1000), torch.randn(5), torch.rand(3)]
    torch.manual_seed(9)
    slow, fast = openreg.Stream(), openreg.Stream()
    with openreg.stream(slow):
        openreg._sleep(100)  # the first draw waits behind this on `slow`
        first = torch.randn(1000, device="openreg")
    with openreg.stream(fast):
        second = torch.randn(5, device="openreg")  # must not overtake the first
    third = torch.rand(3, device="openreg")
    openreg.synchronize()
    assert same(first, expected[0]) and same(second, expected[1]) and same(third, expected[2])


def test_host_access_to_the_generator_waits_for_queued_draws():
    gen = torch.Generator(device="openreg").manual_seed(4)
    cpu = torch.Generator().manual_seed(4)
    openreg._sleep(50)
    torch.randn(100, generator=gen, device="openreg")
    torch.randn(100, generator=cpu)
    assert torch.equal(gen.get_state(), cpu.get_state())  # read after the queued draw
    openreg._sleep(50)
    x = torch.randn(10, generator=gen, device="openreg")
    gen.manual_seed(4)  # replaces the state only after the queued draw used the old one
    cpu_x = torch.randn(10, generator=cpu)
    cpu.manual_seed(4)
    assert same(x, cpu_x)
    assert same(torch.randn(10, generator=gen, device="openreg"), torch.randn(10, generator=cpu))
    clone = gen.clone_state()
    assert clone.device == gen.device and torch.equal(clone.get_state(), cpu.get_state())


def test_cpu_index_tensors_index_openreg_data_as_on_cuda():
    x, i, mask = A.clone(), torch.tensor([0, 2, 5]), A > 0
    d = x.to("openreg")
    assert same(d[i], x[i]) and same(d[mask], x[mask]) and same(d[i, 1:], x[i, 1:])
    d[i] = 7.0
    x[i] = 7.0
    d.index_put_((i,), torch.tensor(1.5), accumulate=True)
    x.index_put_((i,), torch.tensor(1.5), accumulate=True)
    assert same(d, x)
    two_devices = r"found at least two devices, openreg:0 and openreg:1! \(openreg: aten::index"
    with pytest.raises(RuntimeError, match=two_devices):
        d[i.to("openreg:1")]


# Note [Fused recurrent cells]: ATen calls CUDA-only fused cells on PrivateUse1.
@pytest.mark.parametrize("cls", [torch.nn.LSTM, torch.nn.GRU, torch.nn.LSTMCell, torch.nn.GRUCell])
@pytest.mark.parametrize("bias", [True, False])
def test_recurrent_layers_train_on_openreg(cls, bias):
    torch.manual_seed(0)
    cell = cls in (torch.nn.LSTMCell, torch.nn.GRUCell)
    model = cls(4, 8, bias=bias) if cell else cls(4, 8, num_layers=2, bias=bias)
    x = torch.randn(3, 4) if cell else torch.randn(5, 3, 4)
    on_device = cls(4, 8, bias=bias) if cell else cls(4, 8, num_layers=2, bias=bias)
    on_device = on_device.to("openreg")
    on_device.load_state_dict(model.state_dict())
    first = lambda out: out[0] if isinstance(out, tuple) else out  # noqa: E731
    loss = first(model(x.requires_grad_())).square().sum()
    loss.backward()
    xd = x.detach().to("openreg").requires_grad_()
    with openreg.count_paths() as paths:
        loss_d = first(on_device(xd)).square().sum()
        loss_d.backward()
    # nn.LSTM's first call per shape learns oneDNN's workspace size synchronously (Note [Shapes
    # from the CPU kernel]); test_lstm_layers_run_the_cpus_onednn_kernels_and_learn_their_shapes.
    assert (paths["sync"] == 0 or cls is torch.nn.LSTM) and paths["copying"] == 0
    # The fused cells round differently from the CPU's unfused cell: float tolerance, as on CUDA.
    if cls is torch.nn.LSTM:  # Note [LSTM layers]: the CPU's oneDNN layers, bitwise
        assert same(loss_d, loss) and same(xd.grad, x.grad)
        assert all(same(pd.grad, p.grad) for p, pd in zip(model.parameters(), on_device.parameters(), strict=True))
        return
    torch.testing.assert_close(loss_d.cpu(), loss)
    torch.testing.assert_close(xd.grad.cpu(), x.grad)
    for (name, p), pd in zip(model.named_parameters(), on_device.parameters(), strict=True):
        torch.testing.assert_close(pd.grad.cpu(), p.grad, msg=name)


@pytest.mark.parametrize("bidirectional,batch_first", [(False, False), (True, True)])
def test_lstm_layers_run_the_cpus_onednn_kernels_and_learn_their_shapes(bidirectional, batch_first):
    torch.manual_seed(0)
    # Sizes no other test uses: the shapes learned are per call signature, for the whole process.
    model = torch.nn.LSTM(6, 11, num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
    on_device = torch.nn.LSTM(6, 11, num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
    on_device = on_device.to("openreg")
    on_device.load_state_dict(model.state_dict())
    x = torch.randn(7, 3, 6)
    expected = model(x)
    for call in range(2):
        with openreg.count_paths() as paths:
            out, (h, c) = on_device(x.to("openreg"))
        assert same(out, expected[0]) and same(h, expected[1][0]) and same(c, expected[1][1])
        # Note [Shapes from the CPU kernel]: the first call per signature learns oneDNN's workspace
        # size on the synchronizing path, later ones run asynchronously.
        assert paths["sync"] == (2 * (2 if bidirectional else 1) if call == 0 else 0), (call, dict(paths))


def test_an_operator_without_a_cpu_kernel_is_refused_at_the_call():
    x = torch.randn(4, device="openreg")
    with pytest.raises(NotImplementedError, match="aten::_masked_scale has no CPU kernel"):
        torch._masked_scale(x, x > 0, 2.0)


def test_a_conjugate_bit_a_kernel_sets_on_its_output_reaches_the_device_tensor():
    # linalg_lu_solve(left=False) conjugates its result by setting the result's conjugate bit.
    g = torch.Generator().manual_seed(0)
    lu, pivots = torch.linalg.lu_factor(torch.randn(3, 3, dtype=torch.complex64, generator=g))
    b = torch.randn(4, 3, dtype=torch.complex64, generator=g)
    for adjoint in (False, True):
        expected = torch.linalg.lu_solve(lu, pivots, b, left=False, adjoint=adjoint)
        got = torch.linalg.lu_solve(*to_device((lu, pivots, b)), left=False, adjoint=adjoint)
        assert same(got.resolve_conj(), expected.resolve_conj())


# Note [Regrown outputs] and Note [Unfaithful out kernels]: found by the OpInfo sweep.
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_losses_whose_out_kernels_reduce_into_their_output(dtype):
    x, y = POS.to(dtype).clamp(max=0.9), torch.rand(8, 6, generator=g).to(dtype)
    for loss in (F.mse_loss, F.binary_cross_entropy, F.huber_loss, F.smooth_l1_loss, F.l1_loss):
        for reduction in ("mean", "sum", "none"):
            for _ in range(2):  # the first call learns the route, the second takes it
                got = loss(x.to("openreg"), y.to("openreg"), reduction=reduction)
                assert same(got, loss(x, y, reduction=reduction)), (loss.__name__, reduction)
    out = torch.empty(0, device="openreg")
    torch.ops.aten.mse_loss.out(x.float().to("openreg"), y.float().to("openreg"), 1, out=out)
    assert same(out, F.mse_loss(x.float(), y.float()))


# Note [Layer norm]: ATen's own CPU kernels, writing into device memory.
@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32,) * 2, (torch.float64,) * 2, (torch.bfloat16,) * 2,
                                               (torch.float16,) * 2, (torch.bfloat16, torch.float32)])
def test_layer_norm_runs_the_cpu_kernels_into_device_memory(dtype, param_dtype):
    x = torch.randn(4, 5, 6, generator=g).to(dtype).transpose(0, 1).requires_grad_()  # not contiguous
    w, b = (torch.randn(4, 6, generator=g).to(param_dtype).requires_grad_() for _ in range(2))
    expected = torch.ops.aten.native_layer_norm(x, [4, 6], w, b, 1e-5)
    grad = torch.randn_like(expected[0])
    expected[0].backward(grad)
    xd, wd, bd = (t.detach().to("openreg").requires_grad_() for t in (x, w, b))
    with openreg.count_paths() as paths:
        got = torch.ops.aten.native_layer_norm(xd, [4, 6], wd, bd, 1e-5)
        got[0].backward(grad.to("openreg"))
    assert paths["async"] == 0 and paths["sync"] == 0 and paths["copying"] == 0
    assert all(same(a, e) and a.stride() == e.stride() for a, e in zip(got, expected, strict=True))
    assert same(xd.grad, x.grad) and same(wd.grad, w.grad) and same(bd.grad, b.grad)


def test_layer_norm_edge_cases_and_errors_as_on_the_cpu():
    x, bias = torch.randn(3, 6, generator=g, requires_grad=True), torch.randn(6, generator=g, requires_grad=True)
    F.layer_norm(x, [6], None, bias).sum().backward()
    xd, bd = (t.detach().to("openreg").requires_grad_() for t in (x, bias))
    F.layer_norm(xd, [6], None, bd).sum().backward()  # a bias and no weight
    assert same(xd.grad, x.grad) and same(bd.grad, bias.grad)
    empty = torch.randn(0, 6)
    assert same(F.layer_norm(empty.to("openreg"), [6]), F.layer_norm(empty, [6]))
    with pytest.raises(RuntimeError, match=r"expected input with shape \[\*, 6\]"):
        F.layer_norm(torch.randn(3, 5, device="openreg"), [6])
    with pytest.raises(RuntimeError, match="weight is on cpu and the input on openreg:0"):
        F.layer_norm(torch.randn(3, 6, device="openreg"), [6], torch.ones(6))


def test_an_out_kernel_that_restrides_its_output_keeps_the_device_layout():
    # max_unpool2d.out gives a channels-last input's output the channels-last layout; the Meta
    # kernel announced a contiguous one (Note [Regrown outputs]).
    x = IMG.contiguous(memory_format=torch.channels_last)
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    for _ in range(2):  # the first call learns the route, the second takes it
        got = F.max_unpool2d(*to_device((values, indices)), 2)
        assert same(got, F.max_unpool2d(values, indices, 2))


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_takes_the_cpu_kernels_shapes(mode):
    # Note [engine-meta-disagrees]: the CPU's auxiliary outputs differ in shape from the Meta's.
    weight = torch.randn(10, 3, generator=g, requires_grad=True)
    indices, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3])
    psw = torch.rand(8, generator=g) if mode == "sum" else None
    expected = F.embedding_bag(indices, weight, offsets, mode=mode, per_sample_weights=psw)
    expected.square().sum().backward()
    wd = weight.detach().to("openreg").requires_grad_()
    got = F.embedding_bag(*to_device((indices, wd, offsets)), mode=mode, per_sample_weights=to_device(psw))
    got.square().sum().backward()
    assert same(got, expected) and same(wd.grad, weight.grad)
    for forward_only in (torch.ops.aten._embedding_bag_forward_only, torch.ops.aten._embedding_bag):
        args = (weight.detach(), indices, offsets, False, ["sum", "mean", "max"].index(mode), False, psw)
        assert same(forward_only(*to_device(args)), forward_only(*args))


@pytest.mark.parametrize(
    "fn, shape",
    [
        (torch.fft.rfftn, (4, 6, 9)),
        (lambda t: torch.fft.rfft2(t), (2, 3, 8, 10)),
        (lambda t: torch.linalg.eig(t), (6, 6)),
        (lambda t: torch.linalg.eig(t), (3, 7, 7)),
    ],
)
def test_results_have_the_cpu_kernels_strides_where_the_meta_kernels_differ(fn, shape):
    # Note [engine-meta-disagrees]: eig's eigenvectors are column-major on the CPU and row-major
    # on Meta; rfftn's result is contiguous on the CPU and permuted on Meta. Sizes agree.
    x = torch.randn(shape, generator=g)
    expected = fn(x)
    expected = expected if isinstance(expected, tuple) else (expected,)
    # The first call per signature learns the CPU's strides (shapes no other test uses).
    for path in ("sync", "async"):
        with torch.openreg.count_paths() as paths:
            got = fn(x.to("openreg"))
        got = got if isinstance(got, tuple) else (got,)
        assert paths[path] == 1
        assert [t.stride() for t in got] == [t.stride() for t in expected]
        assert same(got, expected)


def test_python_indexing_with_slices_and_an_index_list():
    # Python passes the sliced dimensions as undefined tensors, beside CPU index tensors.
    x = IMG.clone()
    d = x.to("openreg")
    assert same(d[:, :, [0, 3]], x[:, :, [0, 3]]) and same(d[..., (1, 2)], x[..., (1, 2)])
    d[:, 1, [0, 5]] = 2.0
    x[:, 1, [0, 5]] = 2.0
    assert same(d, x)


def test_a_regrown_output_does_not_warn_about_a_resize_the_caller_did_not_make():
    # mse_loss.out grows its out tensor and shrinks it back; PyTorch warns about resizing a
    # non-empty out, a warning that belongs to the engine's call, not the user's.
    result = run_python("""
        import torch, torch_openreg, torch.nn.functional as F
        x, y = torch.rand(4, 5, device="openreg"), torch.rand(4, 5, device="openreg")
        for reduction in ("sum", "mean"):
            assert torch.equal(F.mse_loss(x, y, reduction=reduction).cpu(),
                               F.mse_loss(x.cpu(), y.cpu(), reduction=reduction))
        torch.openreg.synchronize()
        print("ok")
    """)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr
    assert "was resized" not in result.stderr


def test_a_meta_kernel_that_needs_data_hands_the_call_to_the_cpu_kernel():
    x, repeats = A.to("openreg"), torch.tensor([1, 0, 2, 1, 1, 3, 0, 2])
    # The Meta kernel raises "cannot repeat_interleave a meta tensor without output_size".
    assert same(torch.repeat_interleave(x, repeats.to("openreg"), dim=0), torch.repeat_interleave(A, repeats, dim=0))
    with pytest.raises(RuntimeError, match="must match the size"):  # and errors are still the CPU's
        x + torch.ones(5, device="openreg")


def test_factories_without_tensor_arguments_run_on_the_engine():
    # The Meta call of a factory asked for device="openreg" once came back to the engine without
    # end (a stack overflow, found by the OpInfo sweep).
    for fn in (lambda dev: torch.tril_indices(4, 3, 1, device=dev),
               lambda dev: torch.triu_indices(4, 5, -1, device=dev),
               lambda dev: torch.arange(2, 11, 3, device=dev), lambda dev: torch.linspace(0, 1, 9, device=dev)):
        got = fn("openreg")
        assert got.device.type == "openreg" and same(got, fn("cpu"))


def test_out_arguments_resized_on_the_synchronizing_path():
    # linalg_lstsq.out has no Meta kernel: its CPU kernel resizes the outs on the synchronizing path.
    for dtype in (torch.float32, torch.complex64):
        a, b = torch.randn(5, 3, dtype=dtype, generator=g), torch.randn(5, 2, dtype=dtype, generator=g)
        expected = torch.linalg.lstsq(a, b)
        got = torch.linalg.lstsq(a.to("openreg"), b.to("openreg"))
        for x, y in zip(got, expected, strict=True):
            # LAPACK's least squares can round the last bit differently from run to run of the
            # same inputs at other addresses: shapes and dtypes exactly, values to tolerance.
            assert x.shape == y.shape and x.dtype == y.dtype and x.device.type == "openreg"
            torch.testing.assert_close(x.cpu(), y)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_takes_the_cpu_fused_kernel_and_equals_cpu_bitwise(causal):
    # Note [Attention backend] in csrc/aten/Attention.cpp: the overrideable backend runs the CPU's
    # flash kernel, not the unfused math path.
    q, k, v = (torch.randn(2, 4, 16, 8, generator=g).requires_grad_() for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    out.square().sum().backward()
    qd, kd, vd = (t.detach().to("openreg").requires_grad_() for t in (q, k, v))
    with openreg.count_paths() as paths:
        out_d = F.scaled_dot_product_attention(qd, kd, vd, is_causal=causal)
        out_d.square().sum().backward()
    assert paths["sync"] == 0 and paths["copying"] == 0
    assert same(out_d, out) and all(same(a.grad, b.grad) for a, b in ((qd, q), (kd, k), (vd, v)))


def test_dropout_draws_from_the_openreg_generator_in_program_order():
    # Note [Dropout]: native_dropout has no Generator argument; on openreg it must not touch the
    # CPU's default generator (re-seeded differently here to catch it).
    x = torch.randn(64, 64, generator=g)
    torch.manual_seed(0)
    expected = [torch.native_dropout(x, p, True)[0] for p in (0.3, 0.0, 1.0)]
    torch.manual_seed(0)
    torch.random.default_generator.manual_seed(1)
    openreg._sleep(30)  # the draws are queued behind this
    got = [F.dropout(x.to("openreg"), p) for p in (0.3, 0.0, 1.0)]
    assert all(same(a, b) for a, b in zip(got, expected, strict=True))
    assert same(F.dropout(x.to("openreg"), 0.3, training=False), x)
    # Attention with dropout draws through native_dropout too: reproducible for a seed.
    q = torch.randn(2, 2, 8, 4, generator=g).to("openreg")
    runs = []
    for _ in range(2):
        torch.manual_seed(5)
        runs.append(F.scaled_dot_product_attention(q, q, q, dropout_p=0.5))
    assert same(runs[0], runs[1].cpu())


def test_a_gradient_the_kernel_does_not_compute_does_not_shift_the_others():
    # native_layer_norm_backward with a bias and no weight: no weight gradient, and the bias
    # gradient must land in its own output (it once landed in the weight's: found by the sweep).
    x, b, grad = (torch.randn(4, 6, dtype=torch.float64, generator=g) for _ in range(3))

    def grads(device):
        xd, bd = x.to(device).requires_grad_(), b[0].to(device).requires_grad_()
        out = torch.native_layer_norm(xd, (6,), None, bd, 1e-5)[0]
        return torch.autograd.grad(out, (xd, bd), grad.to(device))

    assert all(same(a, e) for a, e in zip(grads("openreg"), grads("cpu"), strict=True))


# Note [Batch norm statistics]
@pytest.mark.parametrize("dtype,param_dtype", [(torch.float32,) * 2, (torch.float16,) * 2, (torch.bfloat16,) * 2,
                                               (torch.float16, torch.float32), (torch.bfloat16, None)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_statistics_match_the_cpu_in_shape_and_dtype(dtype, param_dtype, training):
    x = torch.randn(3, 2, 4, generator=g).to(dtype)
    w, b = (None, None) if param_dtype is None else (torch.randn(2, generator=g).to(param_dtype) for _ in range(2))
    stats_dtype = param_dtype or dtype
    for op in (torch.ops.aten.native_batch_norm, torch.ops.aten._native_batch_norm_legit, "with_update", "no_stats"):
        stats = torch.zeros(2, dtype=stats_dtype), torch.ones(2, dtype=stats_dtype)
        stats_d = tuple(s.to("openreg") for s in stats)
        if op == "with_update":  # always training
            call = lambda *a: torch.ops.aten._batch_norm_with_update(*a, 0.1, 1e-5)  # noqa: E731
        elif op == "no_stats":
            call = lambda x, w, b, *_: torch.ops.aten._native_batch_norm_legit.no_stats(  # noqa: E731
                x, w, b, training, 0.1, 1e-5)
            if not training:  # the CPU kernel segfaults here (torch 2.13.0); openreg refuses the call
                with pytest.raises(RuntimeError, match=r"evaluation mode .* running_mean and running_var"):
                    call(*to_device((x, w, b)))
                continue
        else:
            call = lambda *a, op=op: op(*a, training, 0.1, 1e-5)  # noqa: E731
        expected = call(x, w, b, *stats)
        got = call(*to_device((x, w, b)), *stats_d)
        assert all(same(a, e) for a, e in zip(got, expected, strict=True)) and same(stats_d, stats), op
    # nn.BatchNorm in training, backward included (the CPU backward refuses statistics of the
    # wrong dtype).
    xc, xd = x.clone().requires_grad_(), x.to("openreg").requires_grad_()
    F.batch_norm(xc, None, None, w, b, training=True).float().sum().backward()
    F.batch_norm(xd, None, None, *to_device((w, b)), training=True).float().sum().backward()
    assert same(xd.grad, xc.grad)
    with pytest.raises(RuntimeError, match=r"evaluation mode .* running_mean and running_var"):
        torch.ops.aten.native_batch_norm(*to_device((x, w, b)), None, None, False, 0.1, 1e-5)
    if param_dtype is None or param_dtype != dtype:
        return
    # native_layer_norm: mean and rstd in the input's dtype, which its CPU backward needs.
    xc, xd = x.clone().requires_grad_(), x.to("openreg").requires_grad_()
    F.layer_norm(xc, (4,), w.repeat(2), b.repeat(2)).float().sum().backward()
    F.layer_norm(xd, (4,), *to_device((w.repeat(2), b.repeat(2)))).float().sum().backward()
    assert same(xd.grad, xc.grad)
    assert same(torch.native_layer_norm(x.to("openreg"), (4,), None, None, 1e-5),
                torch.native_layer_norm(x, (4,), None, None, 1e-5))


# name: (arguments from a float tensor, the call, the operator it reaches, the quantized dtype)
QUANTIZED_CALLS = {
    "quantize_per_tensor": (
        lambda x: (x, 0.1, 10, torch.qint8), torch.quantize_per_tensor, "aten::quantize_per_tensor", "qint8"
    ),
    "quantize_per_tensor_tensor_qparams": (
        lambda x: (x, x.new_tensor(0.1), x.new_tensor(10, dtype=torch.long), torch.quint8),
        torch.quantize_per_tensor,
        "aten::quantize_per_tensor.tensor_qparams",
        "quint8",
    ),
    "quantize_per_channel": (
        lambda x: (x.view(2, 3), x.new_ones(2), x.new_zeros(2, dtype=torch.long), 0, torch.quint8),
        torch.quantize_per_channel,
        "aten::quantize_per_channel",
        "quint8",
    ),
    "quantize_per_tensor_dynamic": (
        lambda x: (x, torch.qint8, False), torch.quantize_per_tensor_dynamic, "aten::quantize_per_tensor_dynamic",
        "qint8",
    ),
    "empty_qint32": (
        lambda x: (3, x.device), lambda n, device: torch.empty(n, dtype=torch.qint32, device=device), "aten::empty",
        "qint32",
    ),
    "empty_affine_quantized": (
        lambda x: ([3], x.device),
        lambda size, device: torch._empty_affine_quantized(size, scale=0.1, zero_point=1, dtype=torch.qint8,
                                                           device=device),
        "aten::_empty_affine_quantized",
        "qint8",
    ),
}


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*deprecated")
@pytest.mark.parametrize("name", QUANTIZED_CALLS)
def test_quantized_dtypes_are_refused_at_the_call_and_queue_nothing(name):
    arguments, call, operator, dtype = QUANTIZED_CALLS[name]
    x_cpu = torch.linspace(-1, 1, 6)
    x = x_cpu.to("openreg")
    assert call(*arguments(x_cpu)).dtype == getattr(torch, dtype)  # the CPU makes it
    args = arguments(x)
    with settled_memory():
        allocated = openreg.memory_allocated()
        before = openreg.path_counts()
        with pytest.raises(NotImplementedError) as info:
            call(*args)
        after = openreg.path_counts()
        assert openreg.memory_allocated() == allocated
    message = str(info.value)
    assert operator in message and f"torch.{dtype}" in message and "openreg:0" in message, message
    assert "not supported on openreg" in message and "on the CPU" in message, message
    assert {k: after[k] - before[k] for k in ("native", "async", "sync", "copying")} == dict.fromkeys(
        ("native", "async", "sync", "copying"), 0
    )
    openreg.synchronize()  # nothing was queued: no task error surfaces here or later
    y = torch.exp(x) + 1
    assert same(y, torch.exp(x_cpu) + 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.int32])
def test_relu_runs_as_the_cpu_defines_it(dtype):
    # Note [relu through clamp_min]: one asynchronous task, the CPU's values, strides and grads.
    x = (torch.randn(6, 5, generator=g) * 4).to(dtype)
    d = x.to("openreg")
    dt = d.t()
    torch.relu(dt)
    d.clone().relu_()  # each signature met once
    inplace = d.clone()
    with openreg.count_paths() as paths:
        r = torch.relu(dt)
        inplace.relu_()
    assert paths["async"] == 2 and paths["native"] == 0 and paths["meta_calls"] == 0, paths
    expected = torch.relu(x.t())
    assert same(r, expected) and r.stride() == expected.stride()
    assert same(inplace, torch.relu(x))
    if dtype.is_floating_point:
        a, b = x.clone().requires_grad_(), d.clone().requires_grad_()
        torch.relu(a).sum().backward()
        torch.relu(b).sum().backward()
        assert same(b.grad, a.grad)
    with pytest.raises(RuntimeError, match="Boolean inputs not supported for relu"):
        torch.relu(torch.ones(3, dtype=torch.bool, device="openreg"))


def test_mode_with_out_runs_where_its_composite_refuses_the_device():
    # mode.values' composite kernel refuses every device but the CPU, CUDA and XPU; registered to
    # the engine (Engine.cpp#engine-explicit-registrations), it runs the CPU's (PyTorch's
    # test_reductions.py found it).
    results = []
    for device in ("cpu", "openreg"):
        x = torch.tensor([[1.0, 2.0, 2.0], [3.0, 3.0, 1.0]], device=device)
        values, indices = torch.empty(0, device=device), torch.empty(0, dtype=torch.long, device=device)
        torch.mode(x, 1, out=(values, indices))
        results.append((values.cpu(), indices.cpu()))
    assert all(torch.equal(c, d) for c, d in zip(*results, strict=True))


def test_a_meta_kernels_own_refusal_leaves_the_operator_asynchronous():
    # torch 2.14's Meta kernel of neg refuses a bool tensor with a NotImplementedError, the
    # dispatcher's type for a missing Meta kernel: the refusal is the call's (raised at the call,
    # in the CPU's words), and neg keeps its asynchronous path (csrc/aten/engine/MetaKernel.cpp).
    with pytest.raises(type(cpu_error := _raised(lambda: -torch.tensor([True])))) as info:
        -torch.tensor([True], device="openreg")
    assert str(cpu_error).split("\n")[0] in str(info.value)
    x = torch.randn(4, 3)
    with openreg.count_paths() as paths:
        got = -x.to("openreg")
    assert torch.equal(got.cpu(), -x)
    assert paths["async"] >= 1 and paths["sync"] == 0, paths


def _raised(call):
    try:
        call()
    except Exception as error:  # noqa: BLE001 - the CPU's answer, whatever it is
        return error
    raise AssertionError("the CPU accepted the call")


def test_recycled_kernel_aliases_take_each_calls_own_layout():
    # Note [Recycled kernel aliases]: a worker reuses the aliases of earlier tasks. Layouts that
    # differ call after call (rank, strides, offsets, empty and 0-d tensors, a regrown output in
    # between, conjugate views that are never recycled) must each reach the kernel as their own.
    torch.manual_seed(0)
    base = torch.randn(6, 8)
    dev = base.to("openreg")
    views = [
        lambda t: t,
        lambda t: t.t(),
        lambda t: t[1:, 2::2],
        lambda t: t[3],
        lambda t: t[2, 5],
        lambda t: t[:0],
        lambda t: t.reshape(2, 3, 8)[:, 1],
    ]
    for _ in range(3):  # the later rounds run on recycled aliases
        for view in views:
            for dtype in (torch.float32, torch.float64, torch.int64):
                a, b = view(base).to(dtype), view(base.flip(0)).to(dtype)
                x, y = view(dev).to(dtype), view(dev.flip(0)).to(dtype)
                assert same(x + y * 2, a + b * 2)
                assert same((x * y).sum(), (a * b).sum())
        out = torch.empty(0, device="openreg")  # grown by mse_loss.out's kernel (Note [Regrown outputs])
        torch.ops.aten.mse_loss.out(dev, dev.flip(1), 1, out=out)
        assert same(out, F.mse_loss(base, base.flip(1)))
        z = torch.complex(base, base.flip(0))
        assert same(z.to("openreg").conj() * 2, z.conj() * 2)
    torch.openreg.synchronize()


def test_histc_takes_integer_inputs_as_an_accelerator_does():
    # Note [Integer histc]: the CPU refuses integer histc, CUDA counts in the input's dtype, and
    # transformers' MoE layers rely on it on every accelerator.
    x = torch.randint(-50, 200, (1000,), dtype=torch.int64, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.int32, torch.int64, torch.uint8):
        values = x.clamp(0, 255).to(dtype) if dtype == torch.uint8 else x.to(dtype)
        for bins, low, high in ((7, 0, 0), (16, -50, 199), (5, 10, 20), (1, 0, 0)):
            got = torch.histc(values.to("openreg"), bins=bins, min=low, max=high)
            expected = torch.histc(values.double(), bins=bins, min=low, max=high).to(dtype)
            assert same(got, expected)
    f = torch.randn(100)
    assert same(torch.histc(f.to("openreg"), 10), torch.histc(f, 10))  # the CPU's own kernel
