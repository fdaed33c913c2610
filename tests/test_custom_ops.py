"""Custom operators on openreg, in every form of PyTorch's accelerator integration guide (Note
[Custom operators] in csrc/aten/CustomOps.cpp). The CPU is the oracle: each operator also has a
CPU kernel, and results are compared bitwise."""

import time

import pytest
import torch
from torch.library import opcheck

openreg = torch.openreg
ops = torch.ops.openreg

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 6, generator=g)
BIAS = torch.randn(6, generator=g)

# torch 2.13.0's opcheck checks autograd registrations only on CPU, CUDA and XPU tensors
# (torch/testing/_internal/optests/autograd_registration.py); the other checks run on openreg.
OPENREG_CHECKS = ("test_schema", "test_faketensor", "test_aot_dispatch_dynamic")


def same(a, b):
    a = a.cpu()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_custom_abs_runs_its_openreg_kernel_and_matches_the_cpu():
    for x in (X, X.t(), torch.randn(3, dtype=torch.complex64, generator=g), torch.empty(0, 2)):
        with openreg.count_paths() as paths:
            got = ops.custom_abs(x.to("openreg"))
        assert paths["native"] >= 1 and paths["async"] == 0 and paths["sync"] == 0
        assert same(got, ops.custom_abs(x)) and same(got, x.abs().contiguous())


def test_custom_abs_meta_kernel_comes_from_python():
    assert torch._C._dispatch_has_kernel_for_dispatch_key("openreg::custom_abs", "Meta")
    out = ops.custom_abs(torch.empty(2, 3, dtype=torch.complex128, device="meta"))
    assert out.device.type == "meta" and out.dtype == torch.float64 and out.shape == (2, 3)


def test_an_operator_without_a_derivative_refuses_backward_instead_of_a_silent_gradient():
    x = X.to("openreg").requires_grad_()
    y = ops.custom_abs(x)
    with pytest.raises(RuntimeError, match="derivative for openreg::custom_abs is not implemented"):
        y.sum().backward()


@pytest.mark.parametrize("name", ["custom_autograd_fn_returns_self", "custom_autograd_fn_aliasing"])
def test_cpp_autograd_functions_of_the_reference_backend(name):
    op = getattr(ops, name)
    x = X.to("openreg").requires_grad_()
    out = op(x)
    assert out.data_ptr() == x.data_ptr() and out.shape == x.shape  # the input's memory
    (out * 3).sum().backward()
    assert same(x.grad, torch.full_like(X, 1.5))  # gradient 3, halved by the Function


def test_fused_bias_gelu_forward_and_backward_equal_the_cpu():
    xc, bc = X.clone().requires_grad_(), BIAS.clone().requires_grad_()
    yc = ops.fused_bias_gelu(xc, bc)
    yc.square().sum().backward()
    xd, bd = X.to("openreg").requires_grad_(), BIAS.to("openreg").requires_grad_()
    with openreg.count_paths() as paths:
        yd = ops.fused_bias_gelu(xd, bd)
        yd.square().sum().backward()
    assert paths["sync"] == 0 and paths["copying"] == 0
    assert same(yd, yc) and same(xd.grad, xc.grad) and same(bd.grad, bc.grad)
    assert same(yd, torch.nn.functional.gelu(X + BIAS, approximate="tanh"))


def test_fused_bias_gelu_errors_name_the_operator():
    with pytest.raises(RuntimeError, match=r"openreg::fused_bias_gelu: bias must be 1-D"):
        ops.fused_bias_gelu(X.to("openreg"), torch.ones(5, device="openreg"))
    with pytest.raises(RuntimeError, match="input is on openreg:0 and bias on cpu"):
        ops.fused_bias_gelu(X.to("openreg"), BIAS)
    with pytest.raises(RuntimeError, match="cast one to the other"):
        ops.fused_bias_gelu(X.to("openreg"), BIAS.double().to("openreg"))
    with pytest.raises(RuntimeError, match="bias must be 1-D"):  # the C++ Meta kernel checks too
        ops.fused_bias_gelu(torch.empty(4, 6, device="meta"), torch.empty(5, device="meta"))


@pytest.mark.parametrize("name", ["custom_abs", "fused_bias_gelu", "fused_bias_gelu_backward",
                                  "custom_autograd_fn_returns_self", "custom_autograd_fn_aliasing"])
def test_opcheck_passes_for_every_custom_operator(name):
    args = {"custom_abs": (X,), "fused_bias_gelu": (X, BIAS), "fused_bias_gelu_backward": (X, X, BIAS),
            "custom_autograd_fn_returns_self": (X,), "custom_autograd_fn_aliasing": (X,)}[name]
    grad = name not in ("fused_bias_gelu_backward", "custom_abs")  # custom_abs has no derivative

    def fresh(device):
        return tuple(a.clone().to(device).requires_grad_(grad) for a in args)

    opcheck(getattr(ops, name), fresh("cpu"))  # every check, the autograd registration included
    result = opcheck(getattr(ops, name), fresh("openreg"), test_utils=OPENREG_CHECKS)
    assert set(result.values()) == {"SUCCESS"}


def test_torch_compile_aot_eager_traces_through_the_custom_operators():
    def f(x, b):
        y = ops.custom_autograd_fn_aliasing(ops.fused_bias_gelu(x, b))
        return ops.custom_abs(ops.custom_autograd_fn_returns_self(y)).sum()

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    assert same(compiled(X.to("openreg"), BIAS.to("openreg")), f(X, BIAS))

    def g(x, b):
        return ops.fused_bias_gelu(x, b).square().sum()

    xd, bd = X.to("openreg").requires_grad_(), BIAS.to("openreg").requires_grad_()
    torch.compile(g, backend="aot_eager", fullgraph=True)(xd, bd).backward()
    xc, bc = X.clone().requires_grad_(), BIAS.clone().requires_grad_()
    g(xc, bc).backward()
    assert same(xd.grad, xc.grad) and same(bd.grad, bc.grad)


@torch.library.custom_op("openreg_test::scaled_square", mutates_args=(), device_types="cpu")
def scaled_square(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * x * scale


@scaled_square.register_fake
def _(x, scale):
    return torch.empty_like(x)


scaled_square.register_autograd(
    lambda ctx, grad: (grad * 2 * ctx.x * ctx.scale, None),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "x", inputs[0]) or setattr(ctx, "scale", inputs[1]),
)


def test_python_custom_op_with_only_a_cpu_kernel_runs_on_openreg_through_the_engine():
    # Note [engine-foreign-operators]: its Python kernel runs on the calling thread, never a worker.
    xc = X.clone().requires_grad_()
    scaled_square(xc, 3.0).sum().backward()
    xd = X.to("openreg").requires_grad_()
    with openreg.count_paths() as paths:
        got = scaled_square(xd, 3.0)
    assert paths["sync"] == 1 and paths["copying"] == 0
    got.sum().backward()
    assert same(got, scaled_square(X, 3.0)) and same(xd.grad, xc.grad)
    opcheck(scaled_square, (X.to("openreg").requires_grad_(), 3.0), test_utils=OPENREG_CHECKS)


@torch.library.custom_op("openreg_test::slow_increment", mutates_args=(), device_types="cpu")
def slow_increment(x: torch.Tensor) -> torch.Tensor:
    time.sleep(0.05)
    return x + 1


@slow_increment.register_fake
def _(x):
    return torch.empty_like(x)


def test_a_python_kernel_and_a_synchronize_do_not_deadlock():
    # A Python kernel run by a worker would need the GIL that synchronize() held: a hang.
    y = slow_increment(torch.ones(3, device="openreg"))
    openreg.synchronize()
    assert same(y, torch.full((3,), 2.0))


_lib = torch.library.Library("openreg_test_noautograd", "DEF")
_lib.define("twice(Tensor x) -> Tensor")
_lib.impl("twice", lambda x: x * 2, "CPU")
_lib.impl("twice", lambda x: torch.empty_like(x), "Meta")


def test_an_operator_with_no_autograd_kernel_refuses_backward_on_openreg():
    # csrc/aten/CustomOps.cpp#autograd-fallback: the CPU only warns here and drops the gradient.
    x = torch.ones(3, device="openreg", requires_grad=True)
    y = torch.ops.openreg_test_noautograd.twice(x)
    assert same(y.detach(), torch.full((3,), 2.0))
    with pytest.raises(RuntimeError, match="derivative for openreg_test_noautograd::twice is not implemented"):
        y.sum().backward()
    with torch.no_grad():  # without gradients the operator runs as before
        assert same(torch.ops.openreg_test_noautograd.twice(x), torch.full((3,), 2.0))
