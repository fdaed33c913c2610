// openreg::fused_bias_gelu: a fused operator added to the openreg namespace from a second library
// fragment (TORCH_LIBRARY_FRAGMENT), as a backend's own fused kernels are. See Note [Custom
// operators] in CustomOps.cpp.
//
// Note [Fused bias GELU]
// fused_bias_gelu(input, bias) = gelu(input + bias, approximate="tanh"), bias along the last
// dimension: the bias-add and activation of a transformer's feed-forward layer in one kernel.
// Forward and backward are separate operators, each with a PrivateUse1 kernel (one stream task on
// kernel aliases), a CPU kernel (the oracle: the same ATen CPU code, so results are bitwise
// equal) and a Meta kernel in C++ (shapes and errors without data: torch.compile and opcheck
// trace through it). The autograd kernel ties them together: it saves input and bias, calls the
// backward operator for the input's gradient and sums it over the leading dimensions for the
// bias's.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/add.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/gelu.h>
#include <ATen/ops/gelu_backward.h>
#include <ATen/ops/sum.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include <numeric>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Functions.h"

namespace openreg {
namespace {

// Checks that Meta, CPU and openreg kernels share, in the CPU's words where ATen has them.
void checkArguments(const char* op, const at::Tensor& input, const at::Tensor& bias) {
  TORCH_CHECK(input.dim() >= 1, "openreg::", op, ": input must have at least one dimension");
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == input.size(-1), "openreg::", op,
              ": bias must be 1-D with the input's last dimension (", input.size(-1),
              "), got shape ", bias.sizes());
  TORCH_CHECK(input.scalar_type() == bias.scalar_type(), "openreg::", op, ": input is ",
              input.scalar_type(), " and bias ", bias.scalar_type(), "; cast one to the other");
  TORCH_CHECK(at::isFloatingType(input.scalar_type()), "openreg::", op,
              " takes floating-point tensors, got ", input.scalar_type());
  TORCH_CHECK(input.device() == bias.device(), "openreg::", op, ": input is on ", input.device(),
              " and bias on ", bias.device(), "; move both to one device");
}

// The computation itself, on CPU tensors (kernel aliases or the CPU kernel's arguments).
void geluOfSum(const at::Tensor& input, const at::Tensor& bias, at::Tensor& out) {
  at::gelu_out(out, at::add(input, bias), "tanh");
}

void geluOfSumBackward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& bias,
                       at::Tensor& gradInput) {
  at::gelu_backward_out(gradInput, grad, at::add(input, bias), "tanh");
}

at::Tensor emptyLike(const at::Tensor& t) {
  return at::empty(t.sizes(), t.options());
}

at::Tensor forwardMeta(const at::Tensor& input, const at::Tensor& bias) {
  checkArguments("fused_bias_gelu", input, bias);
  return emptyLike(input);
}

at::Tensor forwardCpu(const at::Tensor& input, const at::Tensor& bias) {
  checkArguments("fused_bias_gelu", input, bias);
  at::Tensor out = emptyLike(input);
  geluOfSum(input, bias, out);
  return out;
}

// [marker: fused-bias-gelu]
at::Tensor forwardOpenReg(const at::Tensor& input, const at::Tensor& bias) {
  checkArguments("fused_bias_gelu", input, bias);
  DeviceScope scope(input.device().index());
  at::Tensor out = emptyLike(input);
  if (out.numel() == 0) return out;
  launchOnCurrentStream(input.device(), "openreg::fused_bias_gelu", {input, bias}, {out},
                        [in = kernelAlias(input), b = kernelAlias(bias),
                         out = kernelAlias(out)]() mutable { geluOfSum(in, b, out); });
  return out;
}

void checkGrad(const at::Tensor& grad, const at::Tensor& input) {
  TORCH_CHECK(grad.sizes() == input.sizes() && grad.scalar_type() == input.scalar_type() &&
                  grad.device() == input.device(),
              "openreg::fused_bias_gelu_backward: grad must match the input in shape, dtype and "
              "device");
}

at::Tensor backwardMeta(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& bias) {
  checkArguments("fused_bias_gelu_backward", input, bias);
  checkGrad(grad, input);
  return emptyLike(input);
}

at::Tensor backwardCpu(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& bias) {
  checkArguments("fused_bias_gelu_backward", input, bias);
  checkGrad(grad, input);
  at::Tensor gradInput = emptyLike(input);
  geluOfSumBackward(grad, input, bias, gradInput);
  return gradInput;
}

at::Tensor backwardOpenReg(const at::Tensor& grad, const at::Tensor& input,
                           const at::Tensor& bias) {
  checkArguments("fused_bias_gelu_backward", input, bias);
  checkGrad(grad, input);
  DeviceScope scope(input.device().index());
  at::Tensor gradInput = emptyLike(input);
  if (gradInput.numel() == 0) return gradInput;
  launchOnCurrentStream(
      input.device(), "openreg::fused_bias_gelu_backward", {grad, input, bias}, {gradInput},
      [g = kernelAlias(grad), in = kernelAlias(input), b = kernelAlias(bias),
       gi = kernelAlias(gradInput)]() mutable { geluOfSumBackward(g, in, b, gi); });
  return gradInput;
}

// The operators through the dispatcher, so each call reaches the kernel of its tensors' device.
at::Tensor callForward(const at::Tensor& input, const at::Tensor& bias) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("openreg::fused_bias_gelu", "")
                             .typed<at::Tensor(const at::Tensor&, const at::Tensor&)>();
  return op.call(input, bias);
}

at::Tensor callBackward(const at::Tensor& grad, const at::Tensor& input, const at::Tensor& bias) {
  static const auto op =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("openreg::fused_bias_gelu_backward", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>();
  return op.call(grad, input, bias);
}

// [marker: fused-bias-gelu-autograd]
struct FusedBiasGelu : public torch::autograd::Function<FusedBiasGelu> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& bias) {
    ctx->save_for_backward({input, bias});
    // Below autograd: calling the operator again must reach its device kernel, not this one.
    at::AutoDispatchBelowADInplaceOrView below;
    return callForward(input, bias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& input = saved[0];
    const at::Tensor& bias = saved[1];
    at::Tensor gradInput = callBackward(grads[0].contiguous(), input, bias);
    std::vector<int64_t> leading(static_cast<size_t>(input.dim() - 1));
    std::iota(leading.begin(), leading.end(), 0);
    at::Tensor gradBias = leading.empty() ? gradInput : gradInput.sum(leading);
    return {gradInput, gradBias};
  }
};

at::Tensor forwardAutograd(const at::Tensor& input, const at::Tensor& bias) {
  return FusedBiasGelu::apply(input, bias);
}

}  // namespace

// [marker: fused-bias-gelu-fragment]
TORCH_LIBRARY_FRAGMENT(openreg, m) {
  m.def("fused_bias_gelu(Tensor input, Tensor bias) -> Tensor");
  m.def("fused_bias_gelu_backward(Tensor grad, Tensor input, Tensor bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) {
  m.impl("fused_bias_gelu", OPENREG_NATIVE(forwardOpenReg));
  m.impl("fused_bias_gelu_backward", OPENREG_NATIVE(backwardOpenReg));
}

TORCH_LIBRARY_IMPL(openreg, CPU, m) {
  m.impl("fused_bias_gelu", TORCH_FN(forwardCpu));
  m.impl("fused_bias_gelu_backward", TORCH_FN(backwardCpu));
}

TORCH_LIBRARY_IMPL(openreg, Meta, m) {
  m.impl("fused_bias_gelu", TORCH_FN(forwardMeta));
  m.impl("fused_bias_gelu_backward", TORCH_FN(backwardMeta));
}

TORCH_LIBRARY_IMPL(openreg, Autograd, m) {
  m.impl("fused_bias_gelu", TORCH_FN(forwardAutograd));
}

}  // namespace openreg
