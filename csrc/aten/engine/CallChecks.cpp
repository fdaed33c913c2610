#include "aten/engine/CallChecks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/native/BinaryOps.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/result_type.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <array>
#include <string_view>
#include <vector>

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

// complex(real, imag) and polar(abs, angle): the CPU requires one dtype for both
// (complex_check_dtype).
void complexSameDtype(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& real = args[0].toTensor();
  const at::Tensor& imag = args[1].toTensor();
  TORCH_CHECK(real.scalar_type() == imag.scalar_type(), "Expected object of scalar type ",
              real.scalar_type(), " but got scalar type ", imag.scalar_type(),
              " for second argument");
}

// add and sub (self, other, alpha): the CPU's alpha_check on the promoted dtype, and sub's refusal
// of two bool tensors; PyTorch's Meta kernel accepts a float alpha for bool tensors.
void alphaFits(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& self = args[0].toTensor();
  const c10::ScalarType dtype = args[1].isTensor() ? at::result_type(self, args[1].toTensor())
                                                   : at::result_type(self, args[1].toScalar());
  at::native::alpha_check(dtype, args[2].toScalar());
  if (op.schema().name() == "aten::sub" || op.schema().name() == "aten::sub_") {
    if (args[1].isTensor()) at::native::sub_check(self, args[1].toTensor());
  }
}

// randperm(n, ..., out): n must fit the out's dtype exactly (check_supported_max_int_with_
// precision, asked of a CPU stand-in of the out so that it queues nothing on the device).
void randpermFits(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  const at::Tensor& out = args.back().toTensor();
  const int64_t n = args[0].toInt();
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  at::native::check_supported_max_int_with_precision(
      n, at::empty({0}, out.options().device(c10::kCPU)));
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

// The CPU kernel's assert_no_internal_overlap on every argument it writes: an expanded tensor
// (stride 0) or another self-overlapping view is refused, in the CPU's words.
void writtenWithoutOverlap(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                           c10::Device) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias != nullptr && alias->isWrite() && args[i].isTensor())
      at::assert_no_internal_overlap(args[i].toTensor());
  }
}

// `check(written, input)` for each argument the operator writes and every other tensor argument.
template <void (*kCheck)(const at::TensorBase&, const at::TensorBase&)>
void eachWrittenAgainstInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < arguments.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    if (alias == nullptr || !alias->isWrite() || !args[i].isTensor()) continue;
    const at::Tensor& written = args[i].toTensor();
    for (size_t j = 0; j < args.size(); ++j) {
      if (j == i) continue;
      forEachTensor(args[j], [&](const at::Tensor& input) {
        if (input.defined()) kCheck(written, input);
      });
    }
  }
}

// The CPU kernel's assert_no_overlap between each argument it writes and every other tensor
// argument: y.index_add_(0, index, y[:3]) would read what it writes.
void writtenApartFromInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                            c10::Device) {
  eachWrittenAgainstInputs<&at::assert_no_overlap>(op, args);
}

// TensorIterator's assert_no_partial_overlap between each written argument and every input, for
// every operator that writes: x[:-1].add_(x[1:]) reads what it writes. The CPU kernel would raise
// it itself, but on the engine's aliases, one storage each, it cannot see the overlap, and the
// Meta kernel cannot either (meta tensors have no addresses).
void writtenApartFromPartialInputs(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                                   c10::Device) {
  eachWrittenAgainstInputs<&at::assert_no_partial_overlap>(op, args);
}

// Operators whose CPU kernel refuses a written argument that overlaps an input, and whose Meta
// kernel does not.
bool checksInputOverlap(std::string_view op) {
  return op == "aten::masked_scatter_" || op == "aten::put_" || op == "aten::scatter_" ||
         op == "aten::scatter_add_" || op == "aten::scatter_reduce_" || op == "aten::index_add_" ||
         op == "aten::index_copy_" || op == "aten::index_fill_" || op == "aten::index_put_" ||
         op == "aten::_index_put_impl_" || op == "aten::masked_fill_";
}

// Operators whose CPU kernel refuses a self-overlapping output and whose Meta kernel does not.
bool checksOverlap(std::string_view op, std::string_view overload) {
  const bool out = overload.find("out") != std::string_view::npos;
  return op == "aten::masked_scatter_" || op == "aten::put_" || op == "aten::scatter_" ||
         op == "aten::scatter_add_" || op == "aten::scatter_reduce_" || op == "aten::bernoulli_" ||
         op == "aten::index_add_" || op == "aten::index_copy_" ||
         (out && (op == "aten::cat" || op == "aten::linspace" || op == "aten::logspace"));
}

// Operators the CPU lets write into an expanded self, with a deprecation warning given by the
// kernel, which on openreg runs in the task.
template <const char* kMessage>
void warnIfExpanded(const c10::OperatorHandle&, c10::ArrayRef<c10::IValue> args, c10::Device) {
  if (at::has_internal_overlap(args[0].toTensor()) == at::MemOverlap::Yes) TORCH_WARN(kMessage);
}

constexpr char kIndexPut[] =
    "Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[indices] = "
    "tensor";
constexpr char kMaskedFill[] =
    "Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar";
constexpr char kIndexFill[] =
    "Use of index_fill_ on expanded tensors is deprecated. Please clone() the tensor before "
    "performing this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar";

constexpr std::array<std::string_view, 8> kRandomInPlace = {
    "aten::random_",    "aten::uniform_",    "aten::normal_", "aten::exponential_",
    "aten::geometric_", "aten::log_normal_", "aten::cauchy_", "aten::bernoulli_"};

}  // namespace

CallChecks callChecksFor(const c10::FunctionSchema& schema) {
  const std::string_view op = schema.name();
  const std::string_view overload = schema.overload_name();
  CallChecks checks;
  auto add = [&](CallCheck check, bool warns) {
    checks.checks.push_back(check);
    checks.warn = checks.warn || warns;
  };
  if (op == "aten::index_fill_") add(&warnIfExpanded<kIndexFill>, true);
  if (op == "aten::masked_fill_") add(&warnIfExpanded<kMaskedFill>, true);
  if (op == "aten::index_put_" || op == "aten::_index_put_impl_")
    add(&warnIfExpanded<kIndexPut>, true);
  if ((op == "aten::index_fill_" || op == "aten::index_fill") && overload == "int_Scalar")
    add(&indexFillScalar, false);
  if ((op == "aten::add" || op == "aten::add_" || op == "aten::sub" || op == "aten::sub_") &&
      schema.arguments().size() >= 3 && schema.arguments()[2].name() == "alpha")
    add(&alphaFits, false);
  if (op == "aten::complex" || op == "aten::polar") add(&complexSameDtype, false);
  if (op == "aten::randperm" && overload.find("out") != std::string_view::npos &&
      schema.arguments().front().type()->kind() == c10::TypeKind::IntType)
    add(&randpermFits, false);
  if (checksOverlap(op, overload)) add(&writtenWithoutOverlap, false);
  if (checksInputOverlap(op)) {
    add(&writtenApartFromInputs, false);
  } else if (std::any_of(schema.arguments().begin(), schema.arguments().end(),
                         [](const c10::Argument& a) {
                           return a.alias_info() != nullptr && a.alias_info()->isWrite();
                         })) {
    add(&writtenApartFromPartialInputs, false);
  }
  // bernoulli_.Tensor's probabilities are data: only its float overload runs on a stand-in.
  if (std::find(kRandomInPlace.begin(), kRandomInPlace.end(), op) != kRandomInPlace.end() &&
      !(op == "aten::bernoulli_" && overload != "float"))
    add(&randomOnStandIn, true);
  return checks;
}

}  // namespace openreg::engine
