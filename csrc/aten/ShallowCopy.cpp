// Which tensors can swap their contents with `Tensor.data = other` (and so which parameters
// nn.Module.to keeps as the same objects), registered for PrivateUse1.
//
// Note [Shallow copies between the CPU and openreg]
// `variable.data = tensor` (VariableHooks::set_data) and nn.Module._apply ask the operator
// aten::_has_compatible_shallow_copy_type whether one TensorImpl may take over another's storage,
// sizes, key set and device. PyTorch's own answer (TensorImpl::has_compatible_shallow_copy_type)
// admits two dense tensors only when both backends are on its list (CPU, CUDA, MPS, HIP, XPU,
// HPU, MTIA), which leaves PrivateUse1 out, and the header says a PrivateUse1 backend answers
// for itself. Dense openreg and CPU tensors are both plain TensorImpls that differ only in key
// set, device and storage, which the shallow copy replaces together, so openreg admits them as
// CUDA admits CUDA and CPU: a CPU parameter can take openreg data and back, and module.openreg()
// keeps its parameter objects (an optimizer built before the move still holds them).
// The dispatcher picks this kernel whenever either tensor is on openreg.
#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <torch/library.h>

#include "aten/Registration.h"

namespace openreg {
namespace {

bool isDenseCpuOrOpenReg(c10::DispatchKeySet keys) {
  constexpr auto kBackends =
      c10::DispatchKeySet({c10::BackendComponent::CPUBit, c10::BackendComponent::PrivateUse1Bit});
  return keys.has_any(c10::DispatchKeySet(c10::DispatchKey::Dense)) && keys.has_any(kBackends);
}

// [marker: shallow-copy-type]
bool hasCompatibleShallowCopyType(const at::Tensor& self, const at::Tensor& from) {
  if (self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set())) return true;
  return self.layout() == at::kStrided && from.layout() == at::kStrided &&
         isDenseCpuOrOpenReg(self.key_set()) && isDenseCpuOrOpenReg(from.key_set());
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_has_compatible_shallow_copy_type", OPENREG_NATIVE(hasCompatibleShallowCopyType));
}

}  // namespace openreg
