// native_dropout on openreg: the operator every accelerator's F.dropout calls.
//
// Note [Dropout]
// native_dropout takes no Generator argument: ATen's CPU kernel draws from the CPU's default
// generator. Run by the engine, it would draw from the wrong generator, on a worker, racing the
// host. This kernel composes the CPU kernel's steps from operators that take a generator (a
// bernoulli_ mask with keep probability 1 - p, then input * mask * 1/(1 - p)), so the mask comes
// from the openreg generator in program order (Note [Asynchronous random numbers]) and equals the
// CPU's native_dropout for the same seed, bit for bit.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/ones_like.h>
#include <torch/library.h>

#include <tuple>

namespace openreg {
namespace {

// [marker: native-dropout]
std::tuple<at::Tensor, at::Tensor> nativeDropout(const at::Tensor& input, double p,
                                                 std::optional<bool> train) {
  if (input.numel() == 0) return {input, at::empty_like(input)};
  const auto maskOptions = input.options().dtype(at::kBool);
  if (train.has_value() && !*train) return {input.clone(), at::ones_like(input, maskOptions)};
  const double keep = 1. - p;
  const double scale = keep == 0 ? 0. : 1. / keep;
  at::Tensor mask = at::empty_like(input, maskOptions);
  mask.bernoulli_(keep);
  return {input.mul(mask).mul_(scale), mask};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("native_dropout", TORCH_FN(nativeDropout));
}

}  // namespace openreg
