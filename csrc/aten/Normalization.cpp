// Normalization on openreg: layer norm through ATen's own CPU kernels, writing into device memory;
// batch norm's saved statistics as the CPU returns them.
//
// Note [Layer norm]
// native_layer_norm and its backward have no .out kernel of their own on the CPU (their .out
// overloads are generated wrappers that run the functional kernel and copy), so through the
// generic engine every call would pay a copy of its output (docs/operators.md has the cost). These
// kernels do what the CPU's do, in the same order: the same input checks, contiguous
// input and parameters, outputs allocated (here on the device), then ATen's LayerNormKernel /
// LayerNormBackwardKernel dispatch stub in one stream task, on kernel-window aliases of the
// outputs. Results are bitwise the CPU's, including the statistics' dtype: the input's, or float32
// for a half/bfloat16 input with float32 parameters (the CPU's "mixed type").
//
// Note [Batch norm statistics]
// native_batch_norm and _native_batch_norm_legit return (output, save_mean, save_invstd). In
// evaluation mode (training=false) the CPU computes no statistics and returns empty tensors of the
// input's dtype; the Meta kernel announces tensors of C elements instead. These kernels run the
// operator through the engine and return what the CPU returns, so results match the CPU's in
// shape and dtype, not only in the normalized output. The statistics' dtype is the input's, or
// float32 for a half/bfloat16 input with float32 parameters, as on the CPU (the Meta kernel says
// float32 for every half input). The same holds for _native_batch_norm_legit (with and without
// running statistics) and _batch_norm_with_update, which nn.BatchNorm reaches in training.
#include <ATen/core/Tensor.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/native/layer_norm.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/DimVector.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <array>
#include <tuple>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "aten/engine/Engine.h"
#include "core/Functions.h"

namespace openreg {
namespace {

// The dtype of batch norm's saved statistics on the CPU: the input's, or float32 for a half or
// bfloat16 input with float32 parameters ("mixed type"). The Meta kernel, like CUDA, says float32.
c10::ScalarType statisticsDtype(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                const std::optional<at::Tensor>& bias,
                                const std::optional<at::Tensor>& runningMean,
                                const std::optional<at::Tensor>& runningVar) {
  auto orUndefined = [](const std::optional<at::Tensor>& t) { return t.value_or(at::Tensor()); };
  const bool mixed = at::native::is_mixed_type(input, orUndefined(weight), orUndefined(bias),
                                               orUndefined(runningMean), orUndefined(runningVar));
  return at::native::param_scalar_type(input, mixed);
}

// Runs a batch norm operator through the engine; returns 1 and 2 (save_mean, save_invstd) then
// take the CPU's dtype, and in evaluation mode its empty shape. The values came from the CPU
// kernel, so the casts are exact.
// In evaluation mode the kernel normalizes with the running statistics: without them the CPU
// kernel reads through null pointers (a segfault in torch 2.13.0), so the call is refused first.
void runBatchNorm(const c10::OperatorHandle& op, torch::jit::Stack* stack, bool training,
                  bool runningStatistics, c10::ScalarType statistics) {
  TORCH_CHECK(training || runningStatistics, OR_DEVICE_NAME ": ", op.schema().operator_name(),
              ": evaluation mode (training=False) normalizes with running_mean and running_var, "
              "and none were given; pass them, or use training=True");
  const at::Tensor input = (*stack)[0].toTensor();
  // The engine counts the call; the statistics' conversions below are part of it.
  engine::ServedCall serving;
  engine::runOnEngine(op, stack);
  for (size_t i : {1, 2}) {
    const at::Tensor saved = (*stack)[i].toTensor();
    (*stack)[i] =
        training ? saved.to(statistics) : at::empty({0}, input.options().dtype(statistics));
  }
}

bool defined(const std::optional<at::Tensor>& t) {
  return t && t->defined();
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> threeResults(const torch::jit::Stack& stack) {
  return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
}

// [marker: batch-norm-eval]
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNorm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, const std::optional<at::Tensor>& runningMean,
    const std::optional<at::Tensor>& runningVar, bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::native_batch_norm", "");
  torch::jit::Stack stack{input, weight, bias, runningMean, runningVar, training, momentum, eps};
  runBatchNorm(op, &stack, training, defined(runningMean) && defined(runningVar),
               statisticsDtype(input, weight, bias, runningMean, runningVar));
  return threeResults(stack);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNormLegit(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& runningMean, at::Tensor& runningVar,
    bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_native_batch_norm_legit", "");
  torch::jit::Stack stack{input, weight, bias, runningMean, runningVar, training, momentum, eps};
  runBatchNorm(op, &stack, training, runningMean.defined() && runningVar.defined(),
               statisticsDtype(input, weight, bias, runningMean, runningVar));
  return threeResults(stack);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeBatchNormLegitNoStats(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, bool training, double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_native_batch_norm_legit", "no_stats");
  torch::jit::Stack stack{input, weight, bias, training, momentum, eps};
  runBatchNorm(op, &stack, training, /*runningStatistics=*/false,
               statisticsDtype(input, weight, bias, {}, {}));
  return threeResults(stack);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> batchNormWithUpdate(
    const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& bias, at::Tensor& runningMean, at::Tensor& runningVar,
    double momentum, double eps) {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::_batch_norm_with_update", "");
  torch::jit::Stack stack{input, weight, bias, runningMean, runningVar, momentum, eps};
  runBatchNorm(op, &stack, /*training=*/true, /*runningStatistics=*/true,
               statisticsDtype(input, weight, bias, runningMean, runningVar));
  return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor(), stack[3].toTensor()};
}

// The parameters of a layer norm on `input`'s device, contiguous as the CPU kernel wants them.
at::Tensor parameter(const std::optional<at::Tensor>& t, const at::Tensor& input,
                     const char* what) {
  if (!t || !t->defined()) return at::Tensor();
  TORCH_CHECK(t->device() == input.device(), OR_DEVICE_NAME ": native_layer_norm: the ", what,
              " is on ", t->device(), " and the input on ", input.device(),
              "; move both to one device");
  return t->contiguous();
}

// [marker: layer-norm]
std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNorm(
    const at::Tensor& input, c10::IntArrayRef normalizedShape,
    const std::optional<at::Tensor>& weightOpt, const std::optional<at::Tensor>& biasOpt,
    double eps) {
  DeviceScope scope(input.device().index());
  const at::Tensor weight = parameter(weightOpt, input, "weight");
  const at::Tensor bias = parameter(biasOpt, input, "bias");
  const bool mixed = at::native::is_mixed_type(input, weight, bias);
  if (mixed) at::native::check_mixed_data_type(input, weight, bias);
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalizedShape, weight, bias);
  const at::Tensor x = input.contiguous();
  at::Tensor y = at::empty(x.sizes(), x.options());
  const auto statistics = x.options().dtype(at::native::param_scalar_type(input, mixed));
  at::Tensor mean = at::empty({M}, statistics);
  at::Tensor rstd = at::empty({M}, statistics);
  if (M > 0) {
    launchOnCurrentStream(
        input.device(), "aten::native_layer_norm", {x, weight, bias}, {y, mean, rstd},
        [x = kernelAlias(x), w = kernelAlias(weight), b = kernelAlias(bias), y = kernelAlias(y),
         mean = kernelAlias(mean), rstd = kernelAlias(rstd), M, N, eps]() mutable {
          at::native::LayerNormKernel(c10::kCPU, x, w, b, M, N, eps, &y, &mean, &rstd);
        });
  }
  // The statistics keep the input's leading dimensions and 1 for each normalized one.
  c10::DimVector statShape(input.sizes().begin(), input.sizes().end());
  std::fill(statShape.end() - static_cast<int64_t>(normalizedShape.size()), statShape.end(), 1);
  return {y, mean.view(statShape), rstd.view(statShape)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> nativeLayerNormBackward(
    const at::Tensor& gradOut, const at::Tensor& input, c10::IntArrayRef normalizedShape,
    const at::Tensor& mean, const at::Tensor& rstd, const std::optional<at::Tensor>& weightOpt,
    const std::optional<at::Tensor>& biasOpt, std::array<bool, 3> outputMask) {
  DeviceScope scope(input.device().index());
  const at::Tensor weight = parameter(weightOpt, input, "weight");
  const at::Tensor bias = parameter(biasOpt, input, "bias");
  const auto [M, N] = at::native::_check_layer_norm_inputs(input, normalizedShape, weight, bias);
  const at::Tensor x = input.contiguous();
  // Gradients of parameters the kernel will not reach (no rows) are zero, as on the CPU.
  auto gradientOf = [M = M](const at::Tensor& t) {
    if (!t.defined()) return at::Tensor();
    return M > 0 ? at::empty(t.sizes(), t.options()) : at::zeros(t.sizes(), t.options());
  };
  at::Tensor dx = outputMask[0] ? at::empty(x.sizes(), x.options()) : at::Tensor();
  at::Tensor dweight = outputMask[1] ? gradientOf(weight) : at::Tensor();
  at::Tensor dbias = outputMask[2] ? gradientOf(bias) : at::Tensor();
  if (M > 0) {
    launchOnCurrentStream(
        input.device(), "aten::native_layer_norm_backward", {gradOut, x, mean, rstd, weight},
        {dx, dweight, dbias},
        [dy = kernelAlias(gradOut), x = kernelAlias(x), mean = kernelAlias(mean),
         rstd = kernelAlias(rstd), w = kernelAlias(weight), dx = kernelAlias(dx),
         dw = kernelAlias(dweight), db = kernelAlias(dbias), M = M, N = N]() mutable {
          at::native::LayerNormBackwardKernel(c10::kCPU, dy, x, mean, rstd, w, M, N, &dx, &dw, &db);
        });
  }
  return {dx, dweight, dbias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_layer_norm", OPENREG_NATIVE(nativeLayerNorm));
  m.impl("native_layer_norm_backward", OPENREG_NATIVE(nativeLayerNormBackward));
  m.impl("native_batch_norm", TORCH_FN(nativeBatchNorm));
  m.impl("_native_batch_norm_legit", TORCH_FN(nativeBatchNormLegit));
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(nativeBatchNormLegitNoStats));
  m.impl("_batch_norm_with_update", TORCH_FN(batchNormWithUpdate));
}

}  // namespace openreg
