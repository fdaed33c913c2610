// Custom operators in the openreg namespace, in the forms PyTorch's accelerator integration guide
// lists. The names and behaviour of the reference backend's examples are kept, so code written for
// it runs here.
//
// Note [Custom operators]
// - openreg::custom_abs: a schema defined in C++ (TORCH_LIBRARY), a PrivateUse1 kernel that queues
//   one task (ATen's abs on kernel aliases, straight into the output), a CPU kernel so the CPU can
//   be the oracle, and a Meta kernel registered from Python (torch_openreg/openreg/meta.py, which
//   the library names with set_python_module, so fake tensors find it without an import). It has
//   no derivative: its autograd kernel is autograd's "not implemented" kernel, so a backward
//   through it raises "derivative for openreg::custom_abs is not implemented" rather than leaving a
//   silent wrong (or missing) gradient.
// - openreg::custom_autograd_fn_returns_self and custom_autograd_fn_aliasing: C++
//   torch::autograd::Functions registered at the autograd keys. The first returns its input itself,
//   the second a view of it; both scale the gradient by 0.5.
// - openreg::fused_bias_gelu (csrc/aten/FusedBiasGelu.cpp) extends the namespace from another
//   library fragment: forward and backward are separate operators with kernels of their own
//   (PrivateUse1, CPU, Meta in C++), tied together by an autograd kernel.
// Python-defined operators (torch.library.custom_op) need nothing from the backend: see
// docs/custom-ops.md.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/empty.h>
#include <torch/csrc/autograd/autograd_not_implemented_fallback.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/library.h>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Functions.h"

namespace openreg {
namespace {

// The output custom_abs returns on any device: contiguous, of the input's real dtype (abs of a
// complex tensor is real), as the Python Meta kernel announces.
at::Tensor absOutput(const at::Tensor& input) {
  return at::empty(input.sizes(), input.options().dtype(c10::toRealValueType(input.scalar_type())));
}

// [marker: custom-abs]
at::Tensor customAbs(const at::Tensor& input) {
  DeviceScope scope(input.device().index());
  at::Tensor out = absOutput(input);
  if (out.numel() == 0) return out;
  launchOnCurrentStream(
      input.device(), "openreg::custom_abs", {input}, {out},
      [in = kernelAlias(input), out = kernelAlias(out)]() mutable { at::abs_out(out, in); });
  return out;
}

at::Tensor customAbsCpu(const at::Tensor& input) {
  at::Tensor out = absOutput(input);
  at::abs_out(out, input);
  return out;
}

// [marker: custom-autograd-functions]
struct ReturnsSelf : public torch::autograd::Function<ReturnsSelf> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor self) { return self; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * 0.5};
  }
};

struct Aliasing : public torch::autograd::Function<Aliasing> {
  static at::Tensor forward(torch::autograd::AutogradContext*, at::Tensor self) {
    return self.view_symint(self.sym_sizes());
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0] * 0.5};
  }
};

at::Tensor returnsSelf(const at::Tensor& input) {
  return ReturnsSelf::apply(input);
}

at::Tensor aliasing(const at::Tensor& input) {
  return Aliasing::apply(input);
}

}  // namespace

// [marker: custom-op-schemas]
TORCH_LIBRARY(openreg, m) {
  m.set_python_module("torch_openreg.openreg.meta");
  m.def("custom_abs(Tensor input) -> Tensor");
  m.def("custom_autograd_fn_returns_self(Tensor input) -> Tensor");
  m.def("custom_autograd_fn_aliasing(Tensor(a) input) -> Tensor(a)");
}

TORCH_LIBRARY_IMPL(openreg, PrivateUse1, m) {
  m.impl("custom_abs", OPENREG_NATIVE(customAbs));
}

TORCH_LIBRARY_IMPL(openreg, CPU, m) {
  m.impl("custom_abs", TORCH_FN(customAbsCpu));
}

// [marker: autograd-fallback]
// Operators of any namespace with no autograd kernel for openreg (a library's operator registered
// only for its devices): autograd's "not implemented" kernel. Called on inputs that require grad,
// the results carry a node whose backward raises "derivative for <op> is not implemented". (The
// default, for the CPU too, warns at backward and leaves the gradient out.)
TORCH_LIBRARY_IMPL(_, AutogradPrivateUse1, m) {
  m.fallback(torch::autograd::autogradNotImplementedFallback());
}

// [marker: custom-op-autograd]
TORCH_LIBRARY_IMPL(openreg, Autograd, m) {
  m.impl("custom_abs", torch::autograd::autogradNotImplementedFallback());
  m.impl("custom_autograd_fn_returns_self", TORCH_FN(returnsSelf));
  m.impl("custom_autograd_fn_aliasing", TORCH_FN(aliasing));
}

}  // namespace openreg
