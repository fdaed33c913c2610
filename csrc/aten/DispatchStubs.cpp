// Kernels registered in the DispatchStub form: ATen's native operator runs on openreg tensors,
// builds its TensorIterator (shapes, dtypes, the output's allocation), and calls the stub, which
// dispatches on the iterator's device type to the kernel registered here.
//
// Note [Stub kernels]
// This is how a backend reuses ATen's operator logic and supplies only the inner loop:
//  1. register the native operator for PrivateUse1 (`abs.out` → at::native::abs_out), so it
//     runs on openreg tensors instead of the engine;
//  2. REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, kernel): the native operator's
//     `abs_stub(iter.device_type(), iter)` lands in `kernel`.
// The kernel receives the iterator over device tensors, already shaped and allocated. Ours queues
// one task on the current stream that runs the CPU's loop over kernel-window aliases of the
// iterator's operands, like the engine's tasks (Note [Generic engine]). Functional `abs` and
// `abs_` reach `abs.out` through their CompositeExplicitAutograd kernels.
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>
#include <ATen/ops/_fused_sdp_choice_ops.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/abs_native.h>
#include <torch/library.h>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Stream.h"

namespace openreg {
namespace {

// [marker: stub-abs]
void absKernel(at::TensorIteratorBase& iter) {
  const at::Tensor& out = iter.output();
  const at::Tensor& in = iter.input();
  launchOnCurrentStream(out.device(), "aten::abs", {in}, {out},
                        [out = describeKernelAlias(out), in = describeKernelAlias(in)] {
                          at::Tensor result = makeKernelAlias(out);
                          at::abs_out(result, makeKernelAlias(in));
                        });
}

// [marker: stub-sdp-choice]
// scaled_dot_product_attention asks _fused_sdp_choice_stub, per device type, which kernel to run;
// a device without an answer gets the unfused math path, which rounds differently from the CPU's
// fused flash kernel. The answer here is the CPU's own choice for the same inputs (it reads only
// their metadata). When that is flash attention, ATen calls _scaled_dot_product_flash_attention_
// for_cpu, which the engine runs like any operator: attention on openreg is bitwise the CPU's.
int64_t sdpChoice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                  const std::optional<at::Tensor>& mask, double dropout, bool causal,
                  std::optional<double> scale, bool gqa) {
  // With dropout, the CPU's flash kernel draws from the CPU's default generator: the math path
  // draws through native_dropout from the openreg generator instead (Note [Dropout]).
  if (dropout > 0) return static_cast<int64_t>(sdp::SDPBackend::math);
  return at::_ops::_fused_sdp_choice::redispatch(c10::DispatchKeySet(c10::DispatchKey::CPU), query,
                                                 key, value, mask, dropout, causal, scale, gqa);
}

at::Tensor& absOut(const at::Tensor& self, at::Tensor& out) {
  DeviceScope scope(self.device().index());  // m.impl kernels get no device guard
  return at::native::abs_out(self, out);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("abs.out", OPENREG_NATIVE(absOut));
}

}  // namespace openreg

namespace at::native {  // where the registration helper lives
REGISTER_PRIVATEUSE1_DISPATCH(abs_stub, &openreg::absKernel)
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &openreg::sdpChoice)
}  // namespace at::native
