// histc on openreg: integer inputs as an accelerator takes them.
//
// [marker: integer-histc]
// Note [Integer histc]
// The CPU's histc refuses integer tensors ("histogram_cpu" not implemented for 'Int'); CUDA's takes
// every dtype but half and bool, counts in the input's dtype and returns that dtype. Libraries
// write for the accelerator: transformers' mixture-of-experts layers count tokens per expert with
// histc of an int32 tensor on every device but the CPU and MPS (docs/testing-libraries.md). So an
// integer input is counted as CUDA counts it: through the CPU's kernel on a float64 copy (every
// integer below 2^53 and every bin boundary between them is exact there, so each value falls in
// the bin CUDA's integer arithmetic gives it), then cast back to the input's dtype. Every other
// dtype runs the CPU's own kernel through the engine, as before.
#include <ATen/core/Tensor.h>
#include <ATen/core/stack.h>
#include <ATen/ops/histc.h>
#include <torch/library.h>

#include "aten/engine/Engine.h"

namespace openreg {
namespace {

void histc(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const at::Tensor self = (*stack)[0].toTensor();
  if (!at::isIntegralType(self.scalar_type(), /*includeBool=*/false)) {
    engine::runOnEngine(op, stack);
    return;
  }
  const int64_t bins = (*stack)[1].toInt();
  const c10::Scalar min = (*stack)[2].toScalar();
  const c10::Scalar max = (*stack)[3].toScalar();
  torch::jit::drop(*stack, 4);
  torch::jit::push(*stack, at::histc(self.to(at::kDouble), bins, min, max).to(self.scalar_type()));
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("histc", torch::CppFunction::makeFromBoxedFunction<&histc>());
}

}  // namespace openreg
