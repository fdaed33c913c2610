// Scaled dot-product attention on openreg: PyTorch's private-backend attention hook.
//
// Note [Attention backend]
// F.scaled_dot_product_attention asks _fused_sdp_choice_stub, per device type, which backend to
// run. For a PrivateUse1 device the fused answer is SDPBackend::overrideable, which makes ATen call
// _scaled_dot_product_fused_attention_overrideable (and, through its derivatives.yaml formula,
// _scaled_dot_product_fused_attention_overrideable_backward). Openreg implements both with the
// CPU's own fused flash kernel (ATen's flash_attention_kernel / flash_attention_backward_kernel
// dispatch stubs, the kernels behind _scaled_dot_product_flash_attention_for_cpu and its backward)
// run on kernel-window aliases of device memory, one stream task per call.
//
// The choice answers overrideable exactly where the CPU would take its flash kernel for the same
// inputs (the CPU's own gates, listed in flashUnsupported), and math elsewhere. So attention on
// openreg runs the kernel the CPU runs and equals the CPU bit for bit, forward and backward:
//  - dropout_p > 0: the CPU's flash kernel has no dropout (and would draw from the CPU's
//    generator). The math path draws through native_dropout from the openreg generator in
//    program order (Note [Dropout]).
//  - an attn_mask that requires grad: the CPU's flash backward returns no mask gradient, and the
//    CPU takes math. The overrideable backward can compute that gradient (below), but choosing it
//    would round differently from the CPU's math; F.scaled_dot_product_attention therefore takes
//    math too.
//  - shapes the flash kernel rejects (not 4-d, batch sizes differ, heads differ without
//    enable_gqa, a mask not 2-d/4-d broadcastable, head dims differ, an empty sequence, a last
//    dimension with stride != 1, dtypes other than float32/64, bfloat16, float16).
// ATen passes key and value to the overrideable kernel with their own number of heads under
// enable_gqa; the CPU's flash kernel serves grouped heads natively. A boolean attn_mask reaches
// the kernel already converted to an additive float mask (convert_boolean_attn_mask).
// sdpa_kernel() is honoured: overrideable only while SDPBackend.OVERRIDEABLE or
// SDPBackend.FLASH_ATTENTION is enabled. The second because the kernel is the CPU's flash kernel:
// a program that enables FLASH_ATTENTION and MATH (torchtitan's attention does, for every device)
// gets flash on the CPU, and on openreg must get the same kernel to equal it, not math.
//
// Note [Attention outputs]
// The forward returns what the CPU's flash wrapper returns, in its layouts: the output in the
// query's memory layout (empty_like), the logsumexp as a contiguous [B, H, L] buffer of the
// accumulation dtype, which the kernel fills through a [B, L, H] view: the layout the schema's
// Meta kernel announces, which torch.compile's graphs rely on (Inductor asserts the strides of
// every extern kernel's outputs; docs/compile.md). The overrideable schema's other results follow
// its Meta kernel: cum_seq_q, cum_seq_k and debug_attn_mask undefined (None), max_q = L, max_k = S,
// philox seed and offset 0-d int64 zeros (no dropout, nothing to replay). The backward's gradients
// are laid out as the Meta kernel says too (empty_like of query, key and value), where the CPU's
// backward wrapper allocates [B, L, H, E] buffers viewed as [B, H, L, E]; their zeroing (the
// kernel accumulates into them) happens inside the one task. The mask gradient
// (grad_input_mask[3], a float attn_bias) is not something the CPU's flash backward computes. The
// same task computes it from the saved logsumexp in the accumulation dtype: P = exp(scale * Q K^T +
// bias - lse) (zero where is_causal masks), dS = P * (dO V^T - rowsum(dO * O)), summed to the
// mask's shape. It equals the CPU's math path to rounding, not bitwise.
#include <ATen/OpMathType.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/zeros.h>
#include <c10/util/StringUtil.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <tuple>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "compat/TorchVersion.h"
#include "core/Functions.h"

namespace openreg {
namespace {

constexpr const char* kForward = "_scaled_dot_product_fused_attention_overrideable";
constexpr const char* kBackward = "_scaled_dot_product_fused_attention_overrideable_backward";

bool isFlashDtype(c10::ScalarType t) {
  return t == at::kFloat || t == at::kDouble || t == at::kBFloat16 || t == at::kHalf;
}

// A mask dimension broadcasts against a target dimension when equal to it or 1.
bool broadcasts(int64_t maskDim, int64_t target) {
  return maskDim == target || maskDim == 1;
}

// [marker: attention-gates]
// Why the CPU's flash kernel cannot serve these inputs, or "" when it can: the CPU's own gates
// (sdp::use_flash_attention_cpp in ATen's sdp_utils_cpp.cpp, whose header offers no entry point),
// asked here without the global "flash enabled" switch, which is the CPU's to read. One difference
// is deliberate: a mask's last stride is free, as on the CPU (ATen's stride gate requires stride
// 1 on every device but the CPU, and the kernel here is the CPU's). tests/test_attention.py
// compares this with the CPU's own choice over a grid of inputs.
std::string flashUnsupported(const sdp::sdp_params& p) {
  const at::Tensor &q = p.query, &k = p.key, &v = p.value;
  if (p.dropout > 0) return "dropout_p > 0 (the CPU's flash kernel has no dropout)";
  if (q.is_nested() || k.is_nested() || v.is_nested()) return "nested tensor inputs";
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4) {
    return c10::str("query, key and value must be 4-d, got ", q.dim(), "-d, ", k.dim(), "-d and ",
                    v.dim(), "-d");
  }
  if (q.size(0) != k.size(0) || q.size(0) != v.size(0)) {
    return c10::str("query, key and value must have the same batch size, got ", q.sizes(), ", ",
                    k.sizes(), ", ", v.sizes());
  }
  const int64_t heads = q.size(1);
  if (p.enable_gqa) {
    if (k.size(1) != v.size(1) || heads % k.size(1) != 0) {
      return c10::str(
          "with enable_gqa, key and value need the same number of heads, dividing the "
          "query's; got ",
          q.sizes(), ", ", k.sizes(), ", ", v.sizes());
    }
  } else if (k.size(1) != heads || v.size(1) != heads) {
    return c10::str("query, key and value have different numbers of heads (", q.sizes(), ", ",
                    k.sizes(), ", ", v.sizes(), ") and enable_gqa is False");
  }
  if (p.attn_mask.has_value() && p.attn_mask->defined()) {
    const at::Tensor& m = *p.attn_mask;
    if (m.requires_grad()) {
      return "the attn_mask requires grad (the CPU's flash backward gives no mask gradient)";
    }
    const bool shapeOk =
        (m.dim() == 2 || m.dim() == 4) && broadcasts(m.size(-2), q.size(2)) &&
        broadcasts(m.size(-1), k.size(2)) &&
        (m.dim() == 2 || (broadcasts(m.size(0), q.size(0)) && broadcasts(m.size(1), heads)));
    if (!shapeOk) {
      return c10::str("attn_mask of shape ", m.sizes(),
                      " is not 2-d (L or 1, S or 1) nor 4-d (B or 1, H or 1, L or 1, S or 1)");
    }
  }
  if (q.size(-1) != k.size(-1) || q.size(-1) != v.size(-1)) {
    return c10::str("query, key and value must have the same head dimension, got ", q.size(-1),
                    ", ", k.size(-1), ", ", v.size(-1));
  }
  if (q.size(2) == 0 || k.size(2) == 0) return "a sequence length is 0";
  if (q.stride(-1) != 1 || k.stride(-1) != 1 || v.stride(-1) != 1) {
    return "the last dimension of query, key or value has a stride other than 1";
  }
  if (q.scalar_type() != k.scalar_type() || q.scalar_type() != v.scalar_type() ||
      !isFlashDtype(q.scalar_type())) {
    return c10::str(
        "query, key and value must share one of float32, float64, bfloat16, float16; "
        "got ",
        q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
  }
  return "";
}

// [marker: attention-choice]
// See Note [Attention backend].
int64_t sdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& mask, double dropout, bool causal,
                  std::optional<double> /*scale*/, bool gqa) {
  const auto& ctx = at::globalContext();
#if OPENREG_TORCH_BEFORE(2, 14)  // needed while torch < 2.14: 3-d inputs never take flash
  const sdp::sdp_params params{query, key, value, mask, dropout, causal, gqa};
#else
  // From 2.14, ATen's scaled_dot_product_attention runs 3-d (H, L, E) inputs through the CPU's
  // flash kernel as one batch (it unsqueezes them, a 3-d mask too): the gates see the same.
  const bool threeD = query.dim() == 3 && key.dim() == 3 && value.dim() == 3;
  const auto batched = [threeD](const at::Tensor& t) { return threeD ? t.unsqueeze(0) : t; };
  std::optional<at::Tensor> batchedMask = mask;
  if (threeD && mask.has_value() && mask->defined() && mask->dim() == 3) {
    batchedMask = mask->unsqueeze(0);
  }
  const sdp::sdp_params params{batched(query), batched(key), batched(value), batchedMask, dropout,
                               causal,         gqa};
#endif
  const bool overrideable = ctx.userEnabledOverrideableSDP() || ctx.userEnabledFlashSDP();
  const std::string why = overrideable ? flashUnsupported(params) : "";
  if (overrideable && why.empty()) return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  if (ctx.userEnabledMathSDP()) return static_cast<int64_t>(sdp::SDPBackend::math);
  TORCH_CHECK(false,
              OR_DEVICE_NAME
              ": scaled_dot_product_attention: no enabled backend can run these "
              "inputs. openreg offers SDPBackend.OVERRIDEABLE (the CPU's flash kernel, also run "
              "when SDPBackend.FLASH_ATTENTION is enabled) and SDPBackend.MATH; ",
              overrideable
                  ? c10::str("OVERRIDEABLE cannot serve them: ", why, "; enable SDPBackend.MATH")
                  : std::string("enable one of them in torch.nn.attention.sdpa_kernel"));
}

void checkSameDevice(const at::Tensor& t, const at::Tensor& query, const char* op,
                     const char* what) {
  TORCH_CHECK(!t.defined() || t.device() == query.device(), OR_DEVICE_NAME ": ", op, ": the ", what,
              " is on ", t.device(), " and the query on ", query.device(),
              "; move them to one device");
}

// The checks of the CPU's flash wrapper (_scaled_dot_product_flash_attention_cpu), and those the
// kernel leaves to its callers, as clear errors at the call rather than a failed task.
void checkFlashInputs(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                      const at::Tensor& mask, double dropout) {
  checkSameDevice(k, q, op, "key");
  checkSameDevice(v, q, op, "value");
  checkSameDevice(mask, q, op, "attn_bias");
  TORCH_CHECK(dropout == 0, OR_DEVICE_NAME ": ", op, ": dropout_p=", dropout,
              " is not supported: the kernel is the CPU's flash attention, which has none. "
              "F.scaled_dot_product_attention with dropout takes the math backend on openreg, "
              "which draws from the openreg generator");
  TORCH_CHECK(q.dim() == 4 && k.dim() == 4 && v.dim() == 4, OR_DEVICE_NAME ": ", op,
              ": query, key and value must be 4-d (B, H, L, E), got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
  TORCH_CHECK(isFlashDtype(q.scalar_type()) && k.scalar_type() == q.scalar_type() &&
                  v.scalar_type() == q.scalar_type(),
              OR_DEVICE_NAME ": ", op,
              ": query, key and value must share one of float32, float64, bfloat16, float16; got ",
              q.scalar_type(), ", ", k.scalar_type(), ", ", v.scalar_type());
  TORCH_CHECK(k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == v.size(1) &&
                  q.size(1) % k.size(1) == 0 && k.size(2) == v.size(2),
              OR_DEVICE_NAME ": ", op,
              ": key and value need the query's batch size, one number of heads dividing the "
              "query's, and one sequence length; got ",
              q.sizes(), ", ", k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.size(3) == k.size(3) && q.size(3) == v.size(3), OR_DEVICE_NAME ": ", op,
              ": query, key and value must have the same head dimension, got ", q.sizes(), ", ",
              k.sizes(), ", ", v.sizes());
  TORCH_CHECK(q.size(2) == 0 || k.size(2) > 0, OR_DEVICE_NAME ": ", op,
              ": key and value have no positions to attend to (sequence length 0)");
  if (mask.defined()) {
    TORCH_CHECK(mask.scalar_type() == at::kFloat || mask.scalar_type() == q.scalar_type(),
                OR_DEVICE_NAME ": ", op, ": attn_bias must be float32 or the query's dtype (",
                q.scalar_type(), "), got ", mask.scalar_type(),
                "; F.scaled_dot_product_attention converts a boolean mask itself");
    TORCH_CHECK(mask.dim() == 2 || mask.dim() == 4, OR_DEVICE_NAME ": ", op,
                ": attn_bias must be 2-d or 4-d, got ", mask.sizes());
  }
}

std::optional<at::Tensor> optionalAlias(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// [marker: attention-forward]
// See Note [Attention outputs].
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor,
           at::Tensor, at::Tensor>
fusedAttention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
               const std::optional<at::Tensor>& attnBias, double dropout, bool causal,
               bool /*returnDebugMask*/, std::optional<double> scale) {
  DeviceScope scope(query.device().index());
  const at::Tensor mask = attnBias.value_or(at::Tensor());
  checkFlashInputs(kForward, query, key, value, mask, dropout);
  const int64_t B = query.size(0), H = query.size(1), L = query.size(2), S = key.size(2);
  at::Tensor out = at::empty_like(query);
  at::Tensor lse =
      at::empty({B, H, L}, query.options().dtype(at::toOpMathType(query.scalar_type())));
  if (out.numel() > 0) {
    launchOnCurrentStream(query.device(), "aten::_scaled_dot_product_fused_attention_overrideable",
                          {query, key, value, mask}, {out, lse},
                          [out = kernelAlias(out), lse = kernelAlias(lse), q = kernelAlias(query),
                           k = kernelAlias(key), v = kernelAlias(value), mask = kernelAlias(mask),
                           causal, scale]() mutable {
                            at::native::flash_attention_kernel(c10::kCPU, out.transpose(1, 2),
                                                               lse.transpose(1, 2), q, k, v, 0.0,
                                                               causal, optionalAlias(mask), scale);
                          });
  }
  const auto seedOptions = query.options().dtype(at::kLong);
  return {out,
          lse,
          at::Tensor(),
          at::Tensor(),
          c10::SymInt(L),
          c10::SymInt(S),
          at::zeros({}, seedOptions),
          at::zeros({}, seedOptions),
          at::Tensor()};
}

// The gradient of an additive attention mask, on CPU tensors (kernel aliases), in the
// accumulation dtype. See Note [Attention outputs].
at::Tensor maskGradient(const at::Tensor& gradOut, const at::Tensor& q, const at::Tensor& k,
                        const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                        const at::Tensor& bias, bool causal, std::optional<double> scale) {
  const auto acc = at::toOpMathType(q.scalar_type());
  const int64_t groups = q.size(1) / k.size(1);
  at::Tensor kf = k.to(acc), vf = v.to(acc);
  if (groups > 1) {  // enable_gqa: query head h attends to key head h / groups
    kf = kf.repeat_interleave(groups, 1);
    vf = vf.repeat_interleave(groups, 1);
  }
  const double s = scale.value_or(1. / std::sqrt(static_cast<double>(q.size(-1))));
  at::Tensor scores = at::matmul(q.to(acc), kf.transpose(-2, -1)).mul_(s).add_(bias.to(acc));
  if (causal) {
    const at::Tensor above = at::ones({q.size(2), k.size(2)}, q.options().dtype(at::kBool));
    scores.masked_fill_(above.triu(1), -std::numeric_limits<double>::infinity());
  }
  const at::Tensor rowLse = lse.unsqueeze(-1);  // [B, H, L, 1]
  // A row with no allowed position has lse = -inf and no probabilities.
  at::Tensor p = scores.sub_(rowLse).exp_().masked_fill_(rowLse.isinf(), 0);
  const at::Tensor dOut = gradOut.to(acc);
  const at::Tensor rowDot = dOut.mul(out.to(acc)).sum(-1, /*keepdim=*/true);
  at::Tensor dScores = p.mul_(at::matmul(dOut, vf.transpose(-2, -1)).sub_(rowDot));
  return dScores.sum_to_size(bias.sizes());
}

// [marker: attention-backward]
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> fusedAttentionBackward(
    const at::Tensor& gradOut, const at::Tensor& query, const at::Tensor& key,
    const at::Tensor& value, const at::Tensor& attnBias, std::array<bool, 4> gradInputMask,
    const at::Tensor& out, const at::Tensor& logsumexp, const at::Tensor& /*cumSeqQ*/,
    const at::Tensor& /*cumSeqK*/, c10::SymInt /*maxQ*/, c10::SymInt /*maxK*/, double dropout,
    bool causal, const at::Tensor& /*philoxSeed*/, const at::Tensor& /*philoxOffset*/,
    std::optional<double> scale) {
  if (!gradOut.defined()) return {};
  DeviceScope scope(query.device().index());
  checkFlashInputs(kBackward, query, key, value, attnBias, dropout);
  checkSameDevice(gradOut, query, kBackward, "grad_out");
  checkSameDevice(out, query, kBackward, "out");
  checkSameDevice(logsumexp, query, kBackward, "logsumexp");
  const bool inputs = gradInputMask[0] || gradInputMask[1] || gradInputMask[2];
  const bool bias = gradInputMask[3] && attnBias.defined();
  // The gradients in the layouts of the schema's Meta kernel (empty_like of each input), which
  // compiled graphs assert; the kernel writes all three through [B, L, H, E] views.
  at::Tensor gq = inputs ? at::empty_like(query) : at::Tensor();
  at::Tensor gk = inputs ? at::empty_like(key) : at::Tensor();
  at::Tensor gv = inputs ? at::empty_like(value) : at::Tensor();
  at::Tensor gb = bias ? at::empty(attnBias.sizes(), attnBias.options()) : at::Tensor();
  const bool work = (inputs && (gq.numel() > 0 || gk.numel() > 0)) || (bias && gb.numel() > 0);
  if (work) {
    launchOnCurrentStream(
        query.device(), "aten::_scaled_dot_product_fused_attention_overrideable_backward",
        {gradOut, query, key, value, attnBias, out, logsumexp}, {gq, gk, gv, gb},
        [gq = kernelAlias(gq), gk = kernelAlias(gk), gv = kernelAlias(gv), gb = kernelAlias(gb),
         dOut = kernelAlias(gradOut), q = kernelAlias(query), k = kernelAlias(key),
         v = kernelAlias(value), mask = kernelAlias(attnBias), out = kernelAlias(out),
         lse = kernelAlias(logsumexp), causal, scale]() mutable {
          if (gq.defined()) {
            gq.zero_();
            gk.zero_();
            gv.zero_();
            at::native::flash_attention_backward_kernel(
                c10::kCPU, gq.transpose(1, 2), gk.transpose(1, 2), gv.transpose(1, 2),
                dOut.transpose(1, 2), q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                out.transpose(1, 2), lse.transpose(1, 2), 0.0, causal, optionalAlias(mask), scale);
          }
          if (gb.defined()) gb.copy_(maskGradient(dOut, q, k, v, out, lse, mask, causal, scale));
        });
  }
  return {gq, gk, gv, gb};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  // torch._fused_sdp_choice, the operator, gives the stub's answer (the engine would run the
  // CPU's choice, which never says overrideable).
  m.impl("_fused_sdp_choice", OPENREG_NATIVE(sdpChoice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", OPENREG_NATIVE(fusedAttention));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward",
         OPENREG_NATIVE(fusedAttentionBackward));
}

}  // namespace openreg

namespace at::native {  // where the registration helper lives
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &openreg::sdpChoice)
}  // namespace at::native
