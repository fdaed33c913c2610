#include "aten/engine/MetaKernel.h"

#include <algorithm>
#include <string_view>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/engine/Arguments.h"
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
// Meta kernel at all. Shape, dtype and device errors propagate: they are the call site's errors.
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
  auto answer = std::make_shared<MetaAnswer>();
  countMetaCall();
  try {
    op.callBoxed(&meta);
  } catch (const c10::NotImplementedError&) {
    traits.metaWorks = 0;  // no Meta kernel at all: remember for the operator
    return nullptr;
  } catch (const std::exception& e) {
    // A Meta kernel written in Python that cannot answer for these inputs (data-dependent shapes:
    // nonzero, boolean indexing) raises Python's NotImplementedError. Remembered per signature
    // only: the operator may answer for other inputs (index with integer indices).
    // Any other error: either the call's own (a shape or dtype error, which the CPU kernel raises
    // in the same words on the synchronizing path, at the call), or a Meta kernel that cannot
    // answer without data ("cannot repeat_interleave a meta tensor without output_size"), which
    // the CPU kernel then answers. Not remembered.
    answer->declined = true;
    answer->remember = std::string_view(e.what()).rfind("NotImplementedError", 0) == 0;
    return answer;
  }
  traits.metaWorks = 1;
  // A quantized result is the call's error, like a dtype error: raised here, never remembered.
  refuseQuantizedResults(op, meta, device);
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias != nullptr && alias->isWrite() && args[i].isTensor() && metaArgs[i].isTensor())
      answer->written.emplace_back(i, shapeOf(metaArgs[i].toTensor()));
  }
  recordResults(schema, meta, answer.get());
  return answer;
}

}  // namespace openreg::engine
