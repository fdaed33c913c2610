// relu on openreg: the CPU's own definition, clamp_min(self, 0), so the engine runs clamp_min's
// .out kernel straight into device memory.
//
// Note [relu through clamp_min]
// ATen's CPU relu is not a kernel of its own: it checks the dtype and calls clamp_min(self, 0)
// (relu_ calls clamp_min_). Through the engine as an operator, relu would have no .out overload,
// so its task would run the functional CPU kernel into host memory and copy the result: a host
// allocation and a copy per call (docs/performance.md has the cost). Registered here as the same
// composition, it reaches clamp_min, a structured operator the engine runs in place of the
// composite (Note [Structured operators on the engine]): the same CPU kernel, bitwise the same
// values, and one task. Registered with TORCH_FN: the call is counted by the clamp_min it makes.
#include <ATen/core/Tensor.h>
#include <ATen/ops/clamp_min.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

namespace openreg {
namespace {

// [marker: relu-clamp-min]
void checkNotBool(const at::Tensor& self, const char* op) {
  TORCH_CHECK(self.scalar_type() != at::kBool,
              "Boolean inputs not supported for relu (openreg: ", op, " on ", self.device(), ")");
}

at::Tensor relu(const at::Tensor& self) {
  checkNotBool(self, "aten::relu");
  return at::clamp_min(self, 0);
}

at::Tensor& relu_(at::Tensor& self) {
  checkNotBool(self, "aten::relu_");
  return at::clamp_min_(self, 0);
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("relu", TORCH_FN(relu));
  m.impl("relu_", TORCH_FN(relu_));
}

}  // namespace openreg
