"""Scaled dot-product attention on openreg: the OVERRIDEABLE backend (Note [Attention backend] in
csrc/aten/Attention.cpp). CPU is the oracle: where the CPU runs its fused flash kernel, openreg runs
the same kernel on device memory and must equal it bit for bit, forward and backward; elsewhere
both take the math path and must also be equal."""

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from torch_openreg._compat import torch_before

openreg = torch.openreg
aten = torch.ops.aten
g = torch.Generator().manual_seed(0)


def same(a, b):
    a = a.cpu()
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(
        a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8)
    )


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


def dev(t):
    return None if t is None else t.detach().to("openreg").requires_grad_(t.requires_grad)


# Inputs (q, k, v, sdpa kwargs) covering the CPU flash kernel's gates: each is served by the
# overrideable backend exactly when the CPU picks flash.
def choice_cases():
    q = randn(2, 4, 8, 16)
    kv2 = randn(2, 2, 8, 16)
    bool_mask = torch.rand(8, 8, generator=g) > 0.3
    yield "plain", (q, q, q), {}
    yield "causal", (q, q, q), {"is_causal": True}
    yield "scale", (q, q, q), {"scale": 0.3}
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        yield f"{dtype}", (q.to(dtype),) * 3, {}
    yield "int", (q.to(torch.int32),) * 3, {}
    yield "mixed dtypes", (q, q.double(), q), {}
    yield "bool mask", (q, q, q), {"attn_mask": bool_mask}
    yield "float mask 4d", (q, q, q), {"attn_mask": randn(2, 4, 8, 8)}
    yield "mask broadcast", (q, q, q), {"attn_mask": randn(1, 4, 1, 8)}
    yield "mask 3d", (q, q, q), {"attn_mask": randn(4, 8, 8)}
    yield "mask requires grad", (q, q, q), {"attn_mask": randn(8, 8).requires_grad_()}
    yield "dropout", (q, q, q), {"dropout_p": 0.2}
    yield "gqa", (q, kv2, kv2), {"enable_gqa": True}
    yield "gqa off", (q, kv2, kv2), {}
    yield "gqa 3 heads", (q, randn(2, 3, 8, 16), randn(2, 3, 8, 16)), {"enable_gqa": True}
    yield "L != S", (randn(2, 4, 5, 16), randn(2, 4, 7, 16), randn(2, 4, 7, 16)), {"is_causal": True}
    yield "Ev != E", (q, q, randn(2, 4, 8, 32)), {}
    yield "3-d", (q[0], q[0], q[0]), {}
    yield "batch broadcast", (q, q[:1], q[:1]), {}
    yield "empty sequence", (randn(2, 4, 0, 16), q, q), {}
    yield "last stride", (q.transpose(-1, -2),) * 3, {}
    yield "heads-last layout", (randn(2, 8, 4, 16).transpose(1, 2),) * 3, {}


@pytest.mark.parametrize("name,qkv,kwargs", list(choice_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_choice_is_overrideable_exactly_where_the_cpu_takes_flash(name, qkv, kwargs):
    cpu = torch._fused_sdp_choice(*qkv, **kwargs)
    kw = {k: dev(v) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    got = torch._fused_sdp_choice(*(dev(t) for t in qkv), **kw)
    expected = SDPBackend.OVERRIDEABLE if cpu == SDPBackend.FLASH_ATTENTION.value else SDPBackend.MATH
    assert cpu in (SDPBackend.FLASH_ATTENTION.value, SDPBackend.MATH.value)
    assert got == expected.value, f"{name}: cpu {cpu}, openreg {got}"


def test_choice_honours_sdpa_kernel():
    q = dev(randn(2, 4, 8, 16))
    with sdpa_kernel(SDPBackend.MATH):
        assert torch._fused_sdp_choice(q, q, q) == SDPBackend.MATH.value
    with sdpa_kernel(SDPBackend.OVERRIDEABLE):
        assert torch._fused_sdp_choice(q, q, q) == SDPBackend.OVERRIDEABLE.value
        # Dropout cannot take the CPU's flash kernel, and math is disabled: a clear error.
        with pytest.raises(RuntimeError, match=r"openreg: .*OVERRIDEABLE cannot serve them: dropout_p"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):  # the CPU's flash kernel, which OVERRIDEABLE is
        assert torch._fused_sdp_choice(q, q, q) == SDPBackend.OVERRIDEABLE.value
        with pytest.raises(RuntimeError, match=r"openreg: .*OVERRIDEABLE cannot serve them: dropout_p"):
            F.scaled_dot_product_attention(q, q, q, dropout_p=0.5)
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):  # not an openreg backend
        with pytest.raises(RuntimeError, match=r"openreg: .*enable one of them"):
            F.scaled_dot_product_attention(q, q, q)


def test_flash_and_math_enabled_run_the_cpus_flash_kernel_as_the_cpu_does():
    # torchtitan's attention enables [CUDNN_ATTENTION, FLASH_ATTENTION, MATH] on every device: the CPU
    # takes its flash kernel, and openreg took math until FLASH_ATTENTION enabled OVERRIDEABLE too
    # (found by make test-torchtitan: its losses parted from the CPU's in the fifth digit).
    backends = [SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION, SDPBackend.MATH]
    q, k, v = (randn(2, 4, 24, 16) for _ in range(3))
    results = {}
    for device in ("cpu", "openreg"):
        qkv = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
        with sdpa_kernel(backends, set_priority=True):
            out = F.scaled_dot_product_attention(*qkv, is_causal=True)
        out.backward(torch.ones_like(out))
        results[device] = [out.detach().cpu()] + [t.grad.cpu() for t in qkv]
    for cpu, ours in zip(results["cpu"], results["openreg"], strict=True):
        assert torch.equal(cpu, ours)


def attention_cases(dtype):
    B, H, L, S, E = 2, 4, 24, 20, 16
    q, k, v = randn(B, H, L, E, dtype=dtype), randn(B, H, S, E, dtype=dtype), randn(B, H, S, E, dtype=dtype)
    kv2 = randn(B, 2, S, E, dtype=dtype), randn(B, 2, S, E, dtype=dtype)
    yield "plain", (q, k, v), {}
    yield "causal", (q, k, v), {"is_causal": True}
    yield "scale", (q, k, v), {"scale": 0.7}
    yield "bool mask", (q, k, v), {"attn_mask": torch.rand(L, S, generator=g) > 0.4}
    yield "bool mask 4d", (q, k, v), {"attn_mask": torch.rand(B, 1, L, S, generator=g) > 0.4}
    yield "float mask", (q, k, v), {"attn_mask": randn(B, H, L, S)}
    yield "float mask broadcast", (q, k, v), {"attn_mask": randn(1, H, 1, S, dtype=dtype)}
    yield "gqa", (q, *kv2), {"enable_gqa": True}
    yield "gqa mask", (q, *kv2), {"enable_gqa": True, "attn_mask": randn(L, S)}
    yield "heads-last layout", tuple(t.transpose(1, 2).contiguous().transpose(1, 2) for t in (q, k, v)), {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", ["plain", "causal", "scale", "bool mask", "bool mask 4d", "float mask",
                                  "float mask broadcast", "gqa", "gqa mask", "heads-last layout"])
def test_attention_forward_and_backward_equal_cpu_bitwise(dtype, case):
    (q, k, v), kwargs = next((qkv, kw) for name, qkv, kw in attention_cases(dtype) if name == case)
    q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
    grad = randn(*q.shape[:-1], v.shape[-1], dtype=dtype)
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    assert type(out.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    out.backward(grad)
    qd, kd, vd = (dev(t) for t in (q, k, v))
    kw = {key: dev(x) if isinstance(x, torch.Tensor) else x for key, x in kwargs.items()}
    with openreg.count_paths() as paths:
        out_d = F.scaled_dot_product_attention(qd, kd, vd, **kw)
        out_d.backward(grad.to("openreg"))
    assert type(out_d.grad_fn).__name__ == "ScaledDotProductFusedAttentionOverrideableBackward0"
    assert paths["sync"] == 0 and paths["copying"] == 0 and paths["native"] >= 2
    assert same(out_d, out) and out_d.stride() == out.stride()
    for a, b in ((qd, q), (kd, k), (vd, v)):
        assert same(a.grad, b.grad), case


@pytest.mark.parametrize("mask_dims", [None, 2, 3])
def test_three_d_attention_equals_cpu_bitwise_with_the_cpu_s_kernel_choice(mask_dims):
    # 3-d (H, L, E) inputs take the CPU's flash kernel from torch 2.14 on (as one batch), math before.
    q, k, v = (randn(4, 8, 16).requires_grad_() for _ in range(3))
    kwargs = {} if mask_dims is None else {"attn_mask": randn(*(4, 8, 8)[3 - mask_dims:])}
    out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    out.backward(torch.ones_like(out))
    qd, kd, vd = (dev(t) for t in (q, k, v))
    kw = {key: dev(x) for key, x in kwargs.items()}
    cpu_choice = torch._fused_sdp_choice(q, k, v, **kwargs)
    assert cpu_choice == (SDPBackend.MATH if torch_before(2, 14) else SDPBackend.FLASH_ATTENTION).value
    assert torch._fused_sdp_choice(qd, kd, vd, **kw) == (
        SDPBackend.MATH if torch_before(2, 14) else SDPBackend.OVERRIDEABLE
    ).value
    out_d = F.scaled_dot_product_attention(qd, kd, vd, **kw)
    out_d.backward(torch.ones_like(out_d))
    assert same(out_d, out)
    for a, b in ((qd, q), (kd, k), (vd, v)):
        assert same(a.grad, b.grad)


def test_outputs_have_the_cpu_flash_kernel_values_in_the_meta_kernel_layouts():
    # Note [Attention outputs]: output and logsumexp with the CPU wrapper's values and dtypes; the
    # output in its layout, the logsumexp in the layout of the schema's Meta kernel, which compiled
    # graphs rely on (docs/compile.md).
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        q = randn(2, 6, 3, 8, dtype=dtype).transpose(1, 2)  # heads-last memory
        k, v = randn(2, 3, 5, 8, dtype=dtype), randn(2, 3, 5, 8, dtype=dtype)
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, is_causal=True)
        r = aten._scaled_dot_product_fused_attention_overrideable(dev(q), dev(k), dev(v), is_causal=True)
        meta = aten._scaled_dot_product_fused_attention_overrideable(
            q.to("meta"), k.to("meta"), v.to("meta"), is_causal=True)
        assert same(r[0], out) and r[0].stride() == out.stride() == meta[0].stride()
        assert same(r[1], lse) and r[1].stride() == meta[1].stride() != lse.stride()
        assert r[2] is None and r[3] is None and r[8] is None and (r[4], r[5]) == (6, 5)
        assert r[6].shape == () and r[6].dtype == torch.int64 and r[6].device.type == "openreg"


def test_backward_gradients_have_the_meta_kernel_layouts():
    # Note [Attention outputs]: compiled graphs assert the Meta kernel's strides (docs/compile.md);
    # query, key and value here are laid out [L, B, H, E], as nn.MultiheadAttention makes them.
    def inputs(device):
        q, k, v = (randn(6, 2, 3, 8).permute(1, 2, 0, 3).to(device) for _ in range(3))
        return q, k, v, randn(2, 3, 6, 8).to(device)

    q, k, v, grad = inputs("openreg")
    out, lse, *_ = aten._scaled_dot_product_fused_attention_overrideable(q, k, v)
    grads = aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad, q, k, v, None, [True, True, True, False], out, lse, None, None, 6, 6, 0.0, False,
        torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long))
    mq, mk, mv, mgrad = inputs("meta")
    mout, mlse, *_ = aten._scaled_dot_product_fused_attention_overrideable(mq, mk, mv)
    meta = aten._scaled_dot_product_fused_attention_overrideable_backward(
        mgrad, mq, mk, mv, None, [True, True, True, False], mout, mlse, None, None, 6, 6, 0.0, False,
        torch.zeros((), dtype=torch.long), torch.zeros((), dtype=torch.long))
    assert out.stride() == mout.stride() and lse.stride() == mlse.stride()
    assert [g.stride() for g in grads[:3]] == [g.stride() for g in meta[:3]] == [q.stride()] * 3
    cpu = aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad.cpu(), q.cpu(), k.cpu(), v.cpu(), out.cpu(), lse.cpu(), 0.0, False)
    assert all(same(a, b) for a, b in zip(grads[:3], cpu, strict=True))


@pytest.mark.parametrize("mask_shape", [(2, 4, 12, 10), (12, 10), (1, 4, 1, 10), (2, 1, 12, 1)])
@pytest.mark.parametrize("gqa", [False, True])
def test_mask_gradient_of_the_overrideable_backward_matches_cpu_math(mask_shape, gqa):
    # The CPU's flash backward has no mask gradient: the task computes it from the logsumexp.
    # The CPU computes it only on its math path, which rounds differently: close, not bitwise.
    q = randn(2, 4, 12, 8, dtype=torch.float64).requires_grad_()
    k, v = (randn(2, 2 if gqa else 4, 10, 8, dtype=torch.float64).requires_grad_() for _ in range(2))
    mask = randn(*mask_shape, dtype=torch.float64).requires_grad_()
    grad = randn(2, 4, 12, 8, dtype=torch.float64)
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).backward(grad)
    qd, kd, vd, md = (dev(t) for t in (q, k, v, mask))
    out_d = aten._scaled_dot_product_fused_attention_overrideable(qd, kd, vd, md)[0]
    out_d.backward(grad.to("openreg"))
    for a, b in ((qd, q), (kd, k), (vd, v), (md, mask)):
        torch.testing.assert_close(a.grad.cpu(), b.grad)
    assert md.grad.shape == mask.shape


def test_mask_gradient_with_causal_and_fully_masked_rows():
    # Causal positions and rows whose every position is -inf carry no probability, so no gradient.
    q, k, v = (randn(1, 2, 6, 4, dtype=torch.float64) for _ in range(3))
    bias = randn(6, 6, dtype=torch.float64)
    bias[2] = float("-inf")
    grad = randn(1, 2, 6, 4, dtype=torch.float64)
    r = aten._scaled_dot_product_fused_attention_overrideable(dev(q), dev(k), dev(v), dev(bias), is_causal=True)
    got = aten._scaled_dot_product_fused_attention_overrideable_backward(
        grad.to("openreg"), dev(q), dev(k), dev(v), dev(bias), [True] * 4, r[0], r[1], r[2], r[3],
        r[4], r[5], 0.0, True, r[6], r[7])[3].cpu()
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    b = bias.clone().requires_grad_()
    scores = (q @ k.transpose(-2, -1) / 2 + b).masked_fill(~causal, float("-inf"))
    p = torch.softmax(scores, -1).nan_to_num(0.0)
    (p @ v).backward(grad)
    torch.testing.assert_close(got, b.grad.nan_to_num(0.0))
    assert (got[2] == 0).all() and (got.triu(1) == 0).all()


def test_attention_with_a_mask_that_requires_grad_takes_math_and_equals_cpu_bitwise():
    q, k, v = (randn(2, 4, 8, 16).requires_grad_() for _ in range(3))
    mask = randn(2, 1, 8, 8).requires_grad_()
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    qd, kd, vd, md = (dev(t) for t in (q, k, v, mask))
    F.scaled_dot_product_attention(qd, kd, vd, attn_mask=md).sum().backward()
    assert all(same(a.grad, b.grad) for a, b in ((qd, q), (kd, k), (vd, v), (md, mask)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_dropout_draws_from_the_openreg_generator_and_equals_cpu_math(dtype):
    # Dropout takes math on both devices (the CPU's flash kernel has none); math's dropout is
    # native_dropout, drawing from the openreg generator (Note [Dropout]): for one seed, openreg
    # equals the CPU bit for bit, output and gradients, and the CPU's generator is not touched.
    q, k, v = (randn(2, 2, 16, 8, dtype=dtype).requires_grad_() for _ in range(3))
    torch.manual_seed(7)
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.3)
    out.sum().backward()
    qd, kd, vd = (dev(t) for t in (q, k, v))
    torch.manual_seed(7)
    torch.random.default_generator.manual_seed(1)  # the CPU's generator must not matter
    openreg._sleep(20)  # the draws queue behind this
    out_d = F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.3)
    out_d.sum().backward()
    assert same(out_d, out) and all(same(a.grad, b.grad) for a, b in ((qd, q), (kd, k), (vd, v)))
    # A different seed drops other weights.
    torch.manual_seed(8)
    assert not same(F.scaled_dot_product_attention(qd, kd, vd, dropout_p=0.3), out)


def test_bad_calls_raise_clear_errors():
    q = dev(randn(2, 4, 8, 16))
    with pytest.raises(RuntimeError, match=r"openreg: _scaled_dot_product_fused_attention_overrideable: dropout_p"):
        aten._scaled_dot_product_fused_attention_overrideable(q, q, q, dropout_p=0.1)
    with pytest.raises(RuntimeError, match=r"openreg: .*the key is on cpu"):
        aten._scaled_dot_product_fused_attention_overrideable(q, q.cpu(), q)
    mask = torch.ones(8, 8, dtype=torch.int64, device="openreg")
    with pytest.raises(RuntimeError, match=r"openreg: .*attn_bias must be float32 or the query's dtype"):
        aten._scaled_dot_product_fused_attention_overrideable(q, q, q, mask)
    with pytest.raises(RuntimeError, match=r"openreg: .*one number of heads dividing"):
        aten._scaled_dot_product_fused_attention_overrideable(q, q[:, :3], q[:, :3])


def train_losses(device, steps=3):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True), 2),
        nn.Linear(32, 8),
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(4, 10, 32, generator=torch.Generator().manual_seed(1)).to(device)
    y = torch.randint(0, 8, (4, 10), generator=torch.Generator().manual_seed(2)).to(device)
    mask = nn.Transformer.generate_square_subsequent_mask(10).to(device)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model[1](model[0](x, mask=mask, is_causal=True)).flatten(0, 1), y.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


def test_transformer_training_losses_equal_cpu_bitwise():
    # nn.MultiheadAttention calls scaled_dot_product_attention (need_weights=False in the encoder
    # layer): on openreg through the overrideable kernels.
    expected = train_losses("cpu")
    with openreg.count_paths() as paths, torch.profiler.profile() as prof:
        got = train_losses("openreg")
    assert paths["copying"] == 0
    ran = {e.name for e in prof.events()}
    assert {"aten::_scaled_dot_product_fused_attention_overrideable",
            "aten::_scaled_dot_product_fused_attention_overrideable_backward"} <= ran
    assert all(same(a, b) for a, b in zip(got, expected, strict=True)), (got, expected)
