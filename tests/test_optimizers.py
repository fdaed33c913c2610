"""Optimizer steps on openreg: equal to the CPU's, and steady steps that never ask a Meta kernel
and never make the host wait (Note [Scalar values are not keyed] in csrc/aten/engine/ShapeCache.h).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

openreg = torch.openreg

OPTIMIZERS = {
    "SGD": lambda params, **kw: torch.optim.SGD(params, lr=0.05, momentum=0.9, **kw),
    "Adam": lambda params, **kw: torch.optim.Adam(params, lr=1e-2, **kw),
    "AdamW": lambda params, **kw: torch.optim.AdamW(params, lr=1e-2, weight_decay=0.1, **kw),
}
FLAVOURS = {"foreach": {"foreach": True}, "fused": {"fused": True}, "for-loop": {"foreach": False}}


def build(device, optimizer, flavour):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 32), nn.LayerNorm(32), nn.ReLU(), nn.Linear(32, 5)).to(device)
    opt = OPTIMIZERS[optimizer](model.parameters(), **FLAVOURS[flavour])
    # A schedule changes the learning rate every step: new Scalar values every step.
    schedule = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0 / (1 + step))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 12, generator=g).to(device)
    y = torch.randint(0, 5, (8,), generator=g).to(device)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        schedule.step()

    return model, step


@pytest.mark.parametrize("flavour", sorted(FLAVOURS))
@pytest.mark.parametrize("optimizer", sorted(OPTIMIZERS))
def test_a_steady_optimizer_step_asks_no_meta_kernel_and_never_synchronizes(optimizer, flavour):
    cpu_model, cpu_step = build("cpu", optimizer, flavour)
    model, step = build("openreg", optimizer, flavour)
    for _ in range(3):  # the first steps meet each signature once
        cpu_step()
        step()
    openreg.synchronize()
    with openreg.count_paths() as paths:
        for _ in range(4):
            cpu_step()
            step()
    assert paths["meta_calls"] == 0, paths
    assert paths["sync"] == 0 and paths["copying"] == 0, paths
    for p, q in zip(model.parameters(), cpu_model.parameters(), strict=True):
        assert p.device.type == "openreg"
        torch.testing.assert_close(p.cpu(), q, rtol=0, atol=0)


def test_scalar_values_share_a_signature_but_give_their_own_results():
    x = torch.randn(4, 5)
    d = x.to("openreg")
    torch.add(d, d, alpha=0.5)
    with openreg.count_paths() as paths:
        results = [torch.add(d, d, alpha=a) for a in (0.25, -3.0, 7.5)]
        lists = [torch._foreach_add([d, d], [a, 2 * a]) for a in (1.5, -2.0)]
    assert paths["meta_calls"] <= 1, paths  # the list form's first signature
    for r, a in zip(results, (0.25, -3.0, 7.5), strict=True):
        torch.testing.assert_close(r.cpu(), torch.add(x, x, alpha=a), rtol=0, atol=0)
    for r, a in zip(lists, (1.5, -2.0), strict=True):
        torch.testing.assert_close(r[1].cpu(), x + 2 * a, rtol=0, atol=0)


def test_a_scalars_kind_still_decides_the_result_dtype():
    i = torch.arange(6).reshape(2, 3)
    d = i.to("openreg")
    for value in (2, 2.5, True, 3, 0.5):
        r = d + value
        assert r.dtype == (i + value).dtype
        torch.testing.assert_close(r.cpu(), i + value, rtol=0, atol=0)


@pytest.mark.parametrize("bounds", [(0, 5, 1), (0, 9, 1), (1.0, 4.0, 0.5), (1.0, 7.0, 0.5), (-3, 3, 2)])
def test_arange_bounds_set_the_shape_and_stay_keyed(bounds):
    start, end, step = bounds
    r = torch.arange(start, end, step, device="openreg")
    torch.testing.assert_close(r.cpu(), torch.arange(start, end, step), rtol=0, atol=0)
    out = torch.empty(0, device="openreg")
    torch.arange(start, end, step, out=out)
    assert out.shape == torch.arange(start, end, step).shape


def test_an_error_a_scalar_value_causes_is_raised_for_every_signature():
    d = torch.arange(4, device="openreg")
    d.pow(2)  # the signature is now cached
    with pytest.raises(RuntimeError, match="negative integer powers"):  # at the call or by the task
        d.pow(-2).cpu()
    assert (d.pow(2).cpu() == torch.arange(4) ** 2).all()
