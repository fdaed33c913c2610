#include "aten/engine/CallChecks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "aten/engine/Arguments.h"
#include "aten/engine/Paths.h"

namespace openreg::engine {
namespace {

// index_fill(_).int_Scalar (self, dim, index, value): the CPU refuses a complex value for a
// non-complex self; torch._meta_registrations' index_fill accepts it.
void indexFillScalar(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& self = args[0].toTensor();
  TORCH_CHECK(!(args[3].isComplexDouble() && !self.is_complex()),
              "index_fill_(): Converting complex Scalar to non-complex type");
}

// The CPU kernel on a CPU stand-in of self with at most one element (an empty self is checked by
// the CPU no further than an empty stand-in is), and a generator of its own.
void randomOnStandIn(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                     c10::Device device) {
  torch::jit::Stack s = standIns(args, c10::kCPU, [](const at::Tensor& t) {
    return at::empty({std::min<int64_t>(t.numel(), 1)}, t.options().device(c10::kCPU));
  });
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "generator") s[i] = at::detail::createCPUGenerator();
  }
  at::AutoDispatchBelowADInplaceOrView guard;
  runCpuKernelNamingDevice(op, &s, device);
}

constexpr std::array<std::string_view, 8> kRandomInPlace = {
    "aten::random_",    "aten::uniform_",    "aten::normal_", "aten::exponential_",
    "aten::geometric_", "aten::log_normal_", "aten::cauchy_", "aten::bernoulli_"};

}  // namespace

CallCheck callCheckFor(const c10::OperatorName& name) {
  const std::string_view op = name.name;
  const std::string_view overload = name.overload_name;
  if ((op == "aten::index_fill_" || op == "aten::index_fill") && overload == "int_Scalar")
    return &indexFillScalar;
  // bernoulli_.Tensor's probabilities are data: only its float overload is checked here.
  if (op == "aten::bernoulli_" && overload != "float") return nullptr;
  if (std::find(kRandomInPlace.begin(), kRandomInPlace.end(), op) != kRandomInPlace.end())
    return &randomOnStandIn;
  return nullptr;
}

}  // namespace openreg::engine
