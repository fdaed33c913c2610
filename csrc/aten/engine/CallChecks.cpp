#include "aten/engine/CallChecks.h"

#include <c10/util/Exception.h>

#include <string_view>

namespace openreg::engine {
namespace {

// index_fill(_).int_Scalar (self, dim, index, value): the CPU refuses a complex value for a
// non-complex self; torch._meta_registrations' index_fill accepts it.
void indexFillScalar(c10::ArrayRef<c10::IValue> args) {
  const at::Tensor& self = args[0].toTensor();
  TORCH_CHECK(!(args[3].isComplexDouble() && !self.is_complex()),
              "index_fill_(): Converting complex Scalar to non-complex type");
}

}  // namespace

CallCheck callCheckFor(const c10::OperatorName& name) {
  const std::string_view op = name.name;
  const std::string_view overload = name.overload_name;
  if ((op == "aten::index_fill_" || op == "aten::index_fill") && overload == "int_Scalar")
    return &indexFillScalar;
  return nullptr;
}

}  // namespace openreg::engine
