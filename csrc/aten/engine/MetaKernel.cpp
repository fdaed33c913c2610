#include "aten/engine/MetaKernel.h"

#include <ATen/TensorIterator.h>

#include <algorithm>
#include <string_view>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/engine/Arguments.h"
#include "aten/engine/CallChecks.h"
#include "aten/engine/Ledger.h"
#include "aten/engine/Quantized.h"
#include "core/Functions.h"

namespace openreg::engine {
namespace {

TensorShape shapeOf(const at::Tensor& t) {
  TensorShape shape;
  if (!t.defined()) return shape;
  shape.sizes.assign(t.sizes().begin(), t.sizes().end());
  shape.strides.assign(t.strides().begin(), t.strides().end());
  shape.dtype = t.scalar_type();
  return shape;
}

// [marker: engine-pointwise-out-layout]
// Note [Resized outs of pointwise operators]
// A structured CPU kernel that resizes an out= argument gives it the layout TensorIterator chose
// from the inputs (resize_out restrides it): add(x, x, out=empty(0)) with x permuted to strides
// (12, 1, 4) writes an out of strides (12, 1, 4). PyTorch's Python Meta kernels of the pointwise
// operators resize it contiguously. So for a pointwise operator's resized out=, the strides come
// from TensorIterator itself, built on the Meta stand-ins of the inputs: the CPU's rule, asked the
// same way.
void restrideResizedPointwiseOut(const c10::FunctionSchema& schema,
                                 const std::vector<c10::IValue>& metaArgs,
                                 c10::IntArrayRef sizesBefore, TensorShape* shape) {
  if (c10::IntArrayRef(shape->sizes) == sizesBefore) return;  // not resized: strides stay
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).set_check_mem_overlap(false).declare_static_dtype(
      shape->dtype);
  config.add_owned_output(at::Tensor());
  bool inputs = false;
  for (size_t j = 0; j < metaArgs.size(); ++j) {
    const auto* alias = schema.arguments()[j].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    forEachTensor(metaArgs[j], [&](const at::Tensor& t) {
      if (!t.defined() || !t.is_meta()) return;
      config.add_owned_const_input(t);
      inputs = true;
    });
  }
  if (!inputs) return;
  const at::TensorIterator iter = config.build();
  const at::Tensor& out = iter.tensor(0);
  if (out.sizes() != c10::IntArrayRef(shape->sizes)) return;
  shape->strides.assign(out.strides().begin(), out.strides().end());
}

// The dispatcher's words for an operator without a Meta kernel: OperatorEntry's missing kernel,
// and ATen's Meta fallback (MetaFallbackKernel.cpp).
bool noMetaKernel(std::string_view message) {
  return message.rfind("Could not run '", 0) == 0 ||
         message.find("attempted to run this operator with Meta tensors") != std::string_view::npos;
}

}  // namespace

void recordResults(const c10::FunctionSchema& schema, const torch::jit::Stack& results,
                   MetaAnswer* answer) {
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    const c10::IValue& r = results.at(i);
    MetaAnswer::Result result;
    if (r.isTensor()) {
      result.kind = MetaAnswer::Result::Kind::Tensor;
      result.tensors.push_back(shapeOf(r.toTensor()));
    } else if (r.isTensorList()) {
      result.kind = MetaAnswer::Result::Kind::TensorList;
      for (const at::Tensor& t : r.toTensorList()) result.tensors.push_back(shapeOf(t));
    } else {
      result.value = r;
    }
    answer->results.push_back(std::move(result));
  }
  answer->everyResultATensor =
      std::all_of(answer->results.begin(), answer->results.end(), [](const auto& r) {
        return r.kind == MetaAnswer::Result::Kind::Tensor &&
               r.tensors.front().dtype != c10::ScalarType::Undefined;
      });
}

// The Meta kernel's answer for one call (Note [Shape cache]); nullptr when the operator has no
// Meta kernel at all. Shape, dtype and device errors are raised at the call, in the CPU's words
// (Note [Meta errors at the call] in CallChecks.h).
// [marker: engine-ask-meta]
std::shared_ptr<const MetaAnswer> askMeta(const c10::OperatorHandle& op, OpTraits& traits,
                                          c10::ArrayRef<c10::IValue> args) {
  const auto& schema = op.schema();
  const c10::Device device(c10::DeviceType::PrivateUse1, current_device());  // the call's (scoped)
  // Note [No quantized tensors]: checked on a shape-cache miss only. A refused call is never
  // remembered, so a signature found in the cache has no quantized dtype.
  refuseQuantizedArguments(op, args, device);
  torch::jit::Stack meta = standIns(args, c10::kMeta, metaLike);
  const std::vector<c10::IValue> metaArgs = meta;  // read back resized out= shapes afterwards
  c10::SmallVector<std::vector<int64_t>, 2> sizesBefore(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    if (schema.arguments()[i].is_out() && args[i].isTensor())
      sizesBefore[i] = args[i].toTensor().sizes().vec();
  }
  auto answer = std::make_shared<MetaAnswer>();
  countMetaCall();
  try {
    // Note [C++ Meta kernels] in CppMeta.h
    if (traits.cppMeta != nullptr) {
      traits.cppMeta->callBoxed(op, c10::DispatchKeySet(c10::DispatchKey::Meta), &meta);
    } else {
      op.callBoxed(&meta);
    }
  } catch (const c10::NotImplementedError& e) {
    // The dispatcher's refusal of an operator with no Meta kernel at all: remembered for the
    // operator. A NotImplementedError the Meta kernel raises itself (torch 2.14's neg of a bool
    // tensor) is this call's refusal, as any other error below.
    if (noMetaKernel(e.what_without_backtrace())) {
      traits.metaWorks = 0;
      return nullptr;
    }
    raiseCpuErrorAtCall(op, args, device);
    answer->declined = true;
    return answer;
  } catch (const std::exception& e) {
    // A Meta kernel written in Python that cannot answer for these inputs (data-dependent shapes:
    // nonzero, boolean indexing) raises Python's NotImplementedError. But a Python
    // NotImplementedError may also be the call's refusal (torch 2.14's neg of a bool tensor), and
    // any other error is the call's own or the Meta kernel's limit: the CPU kernel decides, at the
    // call (Note [Meta errors at the call] in CallChecks.h), and a refused call is never
    // remembered. A call the CPU accepts is declined for its signature only, as the operator may
    // answer for other inputs (index with integer indices): the next call of the signature takes
    // the synchronizing path without asking either kernel again.
    raiseCpuErrorAtCall(op, args, device);
    answer->declined = true;
    return answer;
  }
  traits.metaWorks = 1;
  // A quantized result is the call's error, like a dtype error: raised here, never remembered.
  refuseQuantizedResults(op, meta, device);
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite() && args[i].isTensor() && metaArgs[i].isTensor()) {
      TensorShape shape = shapeOf(metaArgs[i].toTensor());
      if (schema.arguments()[i].is_out() && op.hasTag(at::Tag::pointwise))
        restrideResizedPointwiseOut(schema, metaArgs, sizesBefore[i], &shape);
      answer->written.emplace_back(i, std::move(shape));
    }
  }
  recordResults(schema, meta, answer.get());
  return answer;
}

}  // namespace openreg::engine
