// Mixed precision on openreg: autocast's cast policy, and the gradient scaler's kernels.
//
// Note [Autocast policy]
// Autocast works through the AutocastPrivateUse1 dispatch key, for which PyTorch registers nothing:
// every operator falls through to the next key, except those given a cast policy here. The policy
// is CUDA's, taken from the same X-macro lists ATen builds CUDA's from (ATen/autocast_mode.h), so
// code tuned for CUDA autocast behaves the same on openreg:
//   lower_precision_fp   matmuls, convolutions, linear, attention, RNN cells: run in the autocast
//                        dtype (float16 by default, or bfloat16);
//   fp32                 numerically sensitive operators (exp, log, pow, norms, losses, softmax's
//                        relatives, upsampling): run in float32;
//   fp32_set_opt_dtype   reductions with a dtype argument (sum, prod, softmax, cumsum): float32
//                        unless the caller chose a dtype;
//   fp32_append_dtype    norm: redispatched with a float32 dtype argument;
//   promote              operators mixing inputs (addcmul, index_put, ...): the widest dtype.
// binary_cross_entropy is refused under autocast, as on CUDA and in CUDA's words: it is unsafe in
// float16, and binary_cross_entropy_with_logits is the safe form. Casts of leaf tensors that
// require grad (weights) are cached for the autocast region, as on CUDA
// (at::autocast::cached_cast).
//
// Note [Gradient scaler kernels]
// torch.amp.GradScaler("openreg") calls _amp_foreach_non_finite_check_and_unscale_ (unscale the
// gradients, record any inf/NaN in found_inf) and _amp_update_scale_ (grow or back off the scale)
// once per step. Both are native here: one stream task each, running ATen's CPU kernels on kernel
// aliases, so a step queues them and returns without waiting for the device. With an optimizer
// that takes found_inf itself (fused=True), a step of mixed-precision training never synchronizes.
#include <ATen/autocast_mode.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <vector>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Functions.h"

namespace openreg {
namespace {

// [marker: autocast-bce-refused]
// PyTorch's own words for CUDA (binary_cross_entropy_banned in aten/src/ATen/autocast_mode.cpp,
// not exported), so that code matching CUDA's error ("are unsafe to autocast") matches ours.
at::Tensor binaryCrossEntropyRefused(const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to "
              "autocast.\n"
              "Many models use a sigmoid layer right before the binary cross entropy layer.\n"
              "In this case, combine the two layers using "
              "torch.nn.functional.binary_cross_entropy_with_logits\n"
              "or torch.nn.BCEWithLogitsLoss.  binary_cross_entropy_with_logits and BCEWithLogits "
              "are\n"
              "safe to autocast.");
}

void checkOnDevice(const char* op, const char* what, const at::Tensor& t, c10::Device device) {
  TORCH_CHECK(t.device() == device, OR_DEVICE_NAME ": ", op, ": ", what, " is on ", t.device(),
              ", expected ", device, " like the first tensor; move it there");
}

// [marker: amp-unscale]
void nonFiniteCheckAndUnscale(at::TensorList grads, at::Tensor& foundInf,
                              const at::Tensor& invScale) {
  constexpr const char* op = "_amp_foreach_non_finite_check_and_unscale_";
  const c10::Device device = foundInf.device();
  checkOnDevice(op, "inv_scale", invScale, device);
  std::vector<at::Tensor> gradAliases;
  gradAliases.reserve(grads.size());
  for (const at::Tensor& grad : grads) {
    checkOnDevice(op, "a gradient", grad, device);
    gradAliases.push_back(kernelAlias(grad));
  }
  DeviceScope scope(device.index());
  // The gradients and found_inf are read and written in place.
  std::vector<at::Tensor> written(grads.begin(), grads.end());
  written.push_back(foundInf);
  std::vector<at::Tensor> read = written;
  read.push_back(invScale);
  launchOnCurrentStream(device, "aten::_amp_foreach_non_finite_check_and_unscale_", read, written,
                        [grads = std::move(gradAliases), found = kernelAlias(foundInf),
                         inv = kernelAlias(invScale)]() mutable {
                          at::_amp_foreach_non_finite_check_and_unscale_(grads, found, inv);
                        });
}

// [marker: amp-update-scale]
at::Tensor& updateScale(at::Tensor& scale, at::Tensor& growthTracker, const at::Tensor& foundInf,
                        double growthFactor, double backoffFactor, int64_t growthInterval) {
  constexpr const char* op = "_amp_update_scale_";
  const c10::Device device = scale.device();
  checkOnDevice(op, "growth_tracker", growthTracker, device);
  checkOnDevice(op, "found_inf", foundInf, device);
  DeviceScope scope(device.index());
  launchOnCurrentStream(
      device, "aten::_amp_update_scale_", {foundInf, scale, growthTracker}, {scale, growthTracker},
      [s = kernelAlias(scale), tracker = kernelAlias(growthTracker), found = kernelAlias(foundInf),
       growthFactor, backoffFactor, growthInterval]() mutable {
        at::_amp_update_scale_(s, tracker, found, growthFactor, backoffFactor, growthInterval);
      });
  return scale;
}

}  // namespace

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

// The lists name ATen types unqualified, as ATen's own autocast_mode.cpp sees them.
namespace policy {
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

// [marker: autocast-policy]
TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define OPENREG_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define OPENREG_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define OPENREG_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define OPENREG_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_LOWER_PRECISION_FP(OPENREG_LOWER_PRECISION_FP)
  AT_FORALL_FP32(OPENREG_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(OPENREG_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE)
  AT_FORALL_PROMOTE(OPENREG_PROMOTE)
#undef OPENREG_LOWER_PRECISION_FP
#undef OPENREG_FP32
#undef OPENREG_FP32_SET_OPT_DTYPE
#undef OPENREG_PROMOTE
  m.impl("binary_cross_entropy", TORCH_FN(binaryCrossEntropyRefused));
}

}  // namespace policy

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", OPENREG_NATIVE(nonFiniteCheckAndUnscale));
  m.impl("_amp_update_scale_", OPENREG_NATIVE(updateScale));
}

}  // namespace openreg
