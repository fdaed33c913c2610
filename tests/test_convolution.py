"""Convolution on openreg (csrc/aten/Convolution.cpp): values bitwise equal to the CPU's, and the
output and gradient layouts the CPU's convolution gives, so that what follows a convolution (batch
norm on a channels-last activation) computes in the same order as on the CPU."""

import itertools

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

FORMATS = {
    0: (torch.contiguous_format,),
    1: (torch.contiguous_format,),
    2: (torch.contiguous_format,),
    3: (torch.contiguous_format,),
    4: (torch.contiguous_format, torch.channels_last),
    5: (torch.contiguous_format, torch.channels_last_3d),
}


def layout(t):
    """Which memory formats `t` is contiguous in, and its strides."""
    return tuple(t.is_contiguous(memory_format=f) for f in FORMATS[t.dim()]), t.stride()


def bitwise_equal(a, b):
    a, b = a.cpu().contiguous().reshape(-1), b.contiguous().reshape(-1)
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def conv_inputs(dim, dtype, input_format, weight_format, transposed, groups):
    g = torch.Generator().manual_seed(dim * 100 + groups)
    x = torch.randn(2, 4, *[6] * dim, generator=g).to(dtype)
    w_shape = (4, 6 // groups, *[3] * dim) if transposed else (6, 4 // groups, *[3] * dim)
    w = torch.randn(w_shape, generator=g).to(dtype)
    b = torch.randn(6, generator=g).to(dtype)
    return x.contiguous(memory_format=input_format), w.contiguous(memory_format=weight_format), b


CASES = [
    (dim, dtype, fi, fw, transposed, groups)
    for dim in (1, 2, 3)
    for dtype in (torch.float32, torch.float64, torch.bfloat16)
    for fi, fw in itertools.product(FORMATS[dim + 2], repeat=2)
    for transposed in (False, True)
    for groups in (1, 2)
]


def case_id(case):
    dim, dtype, fi, fw, transposed, groups = case
    short = {torch.contiguous_format: "c", torch.channels_last: "cl", torch.channels_last_3d: "cl"}
    return f"conv{dim}d-{str(dtype)[6:]}-in_{short[fi]}-w_{short[fw]}{'-t' if transposed else ''}-g{groups}"


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_convolution_output_and_gradients_have_the_cpus_values_and_layouts(case):
    dim, dtype, input_format, weight_format, transposed, groups = case
    x, w, b = conv_inputs(dim, dtype, input_format, weight_format, transposed, groups)
    args = ([2] * dim, [1] * dim, [1] * dim, transposed, [0] * dim, groups)
    results = {}
    for device in ("cpu", "openreg"):
        xd, wd, bd = (t.to(device).detach().requires_grad_() for t in (x, w, b))
        out = torch.convolution(xd, wd, bd, *args)
        grad_out = torch.linspace(-1, 1, out.numel(), dtype=dtype).view(out.shape).to(device)
        grads = torch.autograd.grad(out, (xd, wd, bd), grad_out)
        results[device] = (out, *grads)
    for name, got, expected in zip(("output", "grad_input", "grad_weight", "grad_bias"), results["openreg"],
                                   results["cpu"], strict=True):
        assert layout(got) == layout(expected), f"{name}: {layout(got)} != the CPU's {layout(expected)}"
        assert bitwise_equal(got, expected), name


def test_conv2d_keeps_channels_last_with_a_contiguous_gradient():
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    w = torch.randn(5, 3, 3, 3)
    results = {}
    for device in ("cpu", "openreg"):
        xd, wd = x.to(device).detach().requires_grad_(), w.to(device).detach().requires_grad_()
        out = F.conv2d(xd, wd, padding=1)
        out.backward(torch.ones(out.shape, device=device))  # a contiguous gradient
        results[device] = (out, xd.grad, wd.grad)
    for got, expected in zip(results["openreg"], results["cpu"], strict=True):
        assert got.is_contiguous(memory_format=torch.channels_last) == expected.is_contiguous(
            memory_format=torch.channels_last)
        assert got.is_contiguous() == expected.is_contiguous()
        assert bitwise_equal(got, expected)
    assert results["openreg"][0].is_contiguous(memory_format=torch.channels_last)


def small_cnn():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    )


def test_a_channels_last_cnn_with_batch_norm_trains_bitwise_equal_to_the_cpu():
    g = torch.Generator().manual_seed(1)
    images = torch.randn(4, 8, 3, 12, 12, generator=g)
    labels = torch.randint(0, 4, (4, 8), generator=g)
    trained = {}
    for device in ("cpu", "openreg"):
        model = small_cnn().to(device).to(memory_format=torch.channels_last)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        losses = []
        for x, y in zip(images, labels, strict=True):
            x = x.to(device).contiguous(memory_format=torch.channels_last)
            loss = F.cross_entropy(model(x), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        trained[device] = (losses, model.state_dict())
    (cpu_losses, cpu_state), (or_losses, or_state) = trained["cpu"], trained["openreg"]
    assert all(bitwise_equal(a, b) for a, b in zip(or_losses, cpu_losses, strict=True))
    for key, value in cpu_state.items():
        assert bitwise_equal(or_state[key], value), key
        assert layout(or_state[key]) == layout(value), key
