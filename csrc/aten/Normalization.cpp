// Normalization's saved statistics, as the CPU returns them.
//
// Note [Batch norm statistics]
// native_batch_norm and _native_batch_norm_legit return (output, save_mean, save_invstd). In
// evaluation mode (training=false) the CPU computes no statistics and returns empty tensors of the
// input's dtype; the Meta kernel announces tensors of C elements instead. These kernels run the
// operator through the engine and return what the CPU returns, so results match the CPU's in
// shape and dtype, not only in the normalized output. In training mode, half and bfloat16 inputs
// get their statistics in the input's dtype, as on the CPU. native_layer_norm likewise: its mean
// and rstd come back in the input's dtype (the Meta kernel, like CUDA, says float32), which is
// also what its CPU backward kernel expects.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <tuple>

#include "aten/engine/GenericKernel.h"

namespace openreg {
namespace {

std::tuple<at::Tensor, at::Tensor, at::Tensor> run(
    const c10::OperatorHandle& op, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const at::Tensor& runningMean,
    const at::Tensor& runningVar, bool training, double momentum, double eps) {
  torch::jit::Stack stack{input, weight, bias, runningMean, runningVar, training, momentum, eps};
  engine::runOnEngine(op, &stack);
  at::Tensor output = stack[0].toTensor();
  if (training) {
    // Half and bfloat16 inputs: the CPU returns the statistics in the input's dtype (the Meta
    // kernel, like CUDA, in float32). The values came from the CPU kernel, so the cast is exact.
    return {output, stack[1].toTensor().to(input.scalar_type()),
            stack[2].toTensor().to(input.scalar_type())};
  }
  return {output, at::empty({0}, input.options()), at::empty({0}, input.options())};
}

// [marker: batch-norm-eval]
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNorm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& runningMean,
    const std::optional<at::Tensor>& runningVar, bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_batch_norm", "");
  return run(op, input, weight, bias, runningMean.value_or(at::Tensor()),
             runningVar.value_or(at::Tensor()), training, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNormLegit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& runningMean, at::Tensor& runningVar,
    bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_native_batch_norm_legit", "");
  return run(op, input, weight, bias, runningMean, runningVar, training, momentum, eps);
}

// [marker: layer-norm-statistics]
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNorm(
    const at::Tensor& input, c10::SymIntArrayRef normalizedShape,
    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_layer_norm", "");
  torch::jit::Stack stack{input, normalizedShape, weight, bias, eps};
  engine::runOnEngine(op, &stack);
  return {stack[0].toTensor(), stack[1].toTensor().to(input.scalar_type()),
          stack[2].toTensor().to(input.scalar_type())};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_layer_norm", TORCH_FN(nativeLayerNorm));
  m.impl("native_batch_norm", TORCH_FN(nativeBatchNorm));
  m.impl("_native_batch_norm_legit", TORCH_FN(nativeBatchNormLegit));
}

}  // namespace openreg
