"""Mixed precision on openreg: autocast's cast policy (CUDA's, Note [Autocast policy] in
csrc/aten/Autocast.cpp) and gradient scaling without host synchronization (Note [Gradient scaler
kernels]). The CPU under CPU autocast is the oracle where the two policies agree."""

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

openreg = torch.openreg

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, generator=g)
W = torch.randn(5, 8, generator=g)

LOW = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", LOW)
def test_the_cast_policy_is_cudas(dtype):
    x, w = X.to("openreg"), W.to("openreg")
    with torch.autocast("openreg", dtype=dtype):
        h = x @ w.t()
        got = {
            "mm": h, "linear": F.linear(x, w), "conv1d": F.conv1d(x.t()[None], w[:, :, None]),  # lower precision
            "relu": torch.relu(h),  # not listed: runs in its input's dtype
            "exp": torch.exp(h), "layer_norm": F.layer_norm(h, (5,)), "mse_loss": F.mse_loss(h, h),  # fp32
            "sum": h.sum(), "softmax": torch.softmax(h, -1),  # fp32 unless a dtype is given
            "sum_dtype": h.sum(dtype=torch.float64),
            "norm": torch.norm(h),  # fp32 appended as a dtype argument
            "addcmul": torch.addcmul(x, h[:, :1], x),  # promote: the widest input dtype
        }
    expected = {"mm": dtype, "linear": dtype, "conv1d": dtype, "relu": dtype, "exp": torch.float32,
                "layer_norm": torch.float32, "mse_loss": torch.float32, "sum": torch.float32,
                "softmax": torch.float32, "sum_dtype": torch.float64, "norm": torch.float32,
                "addcmul": torch.float32}
    assert {k: v.dtype for k, v in got.items()} == expected
    assert all(v.device.type == "openreg" for v in got.values())
    # The values are the CPU kernels' on the cast inputs.
    assert torch.equal(got["mm"].cpu(), X.to(dtype) @ W.to(dtype).t())
    assert torch.equal(got["exp"].cpu(), torch.exp((X.to(dtype) @ W.to(dtype).t()).float()))


def test_openreg_amp_autocast_and_the_supported_dtypes():
    assert openreg.get_amp_supported_dtype() == [torch.float16, torch.bfloat16]
    assert torch.get_autocast_dtype("openreg") == torch.float16
    with openreg.amp.autocast():
        assert torch.is_autocast_enabled("openreg")
        assert (X.to("openreg") @ W.to("openreg").t()).dtype == torch.float16
    with openreg.amp.autocast(dtype=torch.bfloat16):
        assert (X.to("openreg") @ W.to("openreg").t()).dtype == torch.bfloat16
    with pytest.warns(UserWarning, match="openreg Autocast only supports dtypes of torch.float16"):
        with torch.autocast("openreg", dtype=torch.float32):
            assert not torch.is_autocast_enabled("openreg")


# PyTorch's message for CUDA (binary_cross_entropy_banned in aten/src/ATen/autocast_mode.cpp).
BCE_UNSAFE = (
    "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast.\n"
    "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
    "In this case, combine the two layers using torch.nn.functional.binary_cross_entropy_with_logits\n"
    "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits are\n"
    "safe to autocast."
)


def test_binary_cross_entropy_is_refused_under_autocast_with_cudas_message():
    p, t = torch.rand(4, device="openreg"), torch.rand(4, device="openreg")
    with torch.autocast("openreg"):
        with pytest.raises(RuntimeError, match="are unsafe to autocast") as info:
            F.binary_cross_entropy(p, t)
        assert str(info.value).startswith(BCE_UNSAFE), str(info.value)
        assert F.binary_cross_entropy_with_logits(p, t).dtype == torch.float32
    assert torch.equal(F.binary_cross_entropy(p, t).cpu(), F.binary_cross_entropy(p.cpu(), t.cpu()))


class CountCasts(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.casts = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.casts += func is torch.ops.aten._to_copy.default
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("cache_enabled", [True, False])
def test_weight_casts_are_cached_within_a_region_as_on_the_cpu(cache_enabled):
    def casts(device):
        w, x = W.to(device).requires_grad_(), X.to(device)  # w: a leaf that requires grad, a weight
        with CountCasts() as mode, torch.autocast(device, dtype=torch.bfloat16, cache_enabled=cache_enabled):
            for _ in range(3):
                F.linear(x, w)
        return mode.casts

    assert casts("openreg") == casts("cpu") == (4 if cache_enabled else 6)


def train(device, dtype, steps=12, inf_at=5, fused=True):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=fused)
    scaler = torch.amp.GradScaler(device, init_scale=2.0**10, growth_interval=3)
    data = torch.Generator().manual_seed(1)
    losses, scales, last_step = [], [], None
    for i in range(steps):
        x, y = torch.randn(16, 32, generator=data), torch.randn(16, 8, generator=data)
        if i == inf_at:
            y[0, 0] = float("inf")  # an overflowing step: skipped, and the scale backs off
        x, y = x.to(device), y.to(device)
        with openreg.count_paths() as paths:
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=dtype):
                loss = F.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        last_step = dict(paths)
        losses.append(loss.detach())
        scales.append(scaler._scale.detach().clone())  # updated in place
    return (torch.stack(losses).cpu(), torch.stack(scales).cpu(), [p.detach().cpu() for p in model.parameters()],
            last_step)


@pytest.mark.parametrize("dtype", LOW)
def test_mixed_precision_training_with_grad_scaler_equals_the_cpu_and_never_synchronizes(dtype):
    # Linear, ReLU and mse_loss: operators on which CUDA's policy and the CPU's agree.
    cpu_losses, cpu_scales, cpu_params, _ = train("cpu", dtype)
    losses, scales, params, paths = train("openreg", dtype)
    assert torch.equal(losses, cpu_losses) and torch.equal(scales, cpu_scales)
    assert all(torch.equal(p, c) for p, c in zip(params, cpu_params, strict=True))
    assert scales[5] == scales[4] / 2  # the inf step backed off the scale
    assert paths["sync"] == 0 and paths["copying"] == 0  # a whole step, nothing waits for the device


def test_the_scaler_kernels_are_native_tasks_and_check_devices():
    grads = [torch.tensor([1.0, float("nan")], device="openreg"), torch.ones(3, device="openreg")]
    found, inv = torch.zeros(1, device="openreg"), torch.full((1,), 0.5, device="openreg")
    with openreg.count_paths() as paths:
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, inv)
    assert paths["native"] == 1 and paths["sync"] == 0
    assert found.item() == 1.0 and torch.equal(grads[1].cpu(), torch.full((3,), 0.5))
    with pytest.raises(RuntimeError, match="inv_scale is on cpu, expected openreg:0"):
        torch._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.ones(1))
    scale, tracker = torch.full((1,), 8.0, device="openreg"), torch.zeros(1, dtype=torch.int32, device="openreg")
    torch._amp_update_scale_(scale, tracker, found, 2.0, 0.5, 2)
    assert scale.item() == 4.0 and tracker.item() == 0
