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
// `abs_` reach `abs.out` through their CompositeExplicitAutograd kernels. The attention backend
// choice, _fused_sdp_choice_stub, is registered in Attention.cpp (Note [Attention backend]).
#include <ATen/TensorIterator.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/UnaryOps.h>
#include <ATen/ops/abs.h>
#include <ATen/ops/abs_native.h>
#include <torch/library.h>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"

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
}  // namespace at::native
