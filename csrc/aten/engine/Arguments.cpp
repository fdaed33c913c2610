#include "aten/engine/Arguments.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include "aten/KernelAlias.h"

namespace openreg::engine {
namespace {

at::Tensor taskTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  return isOpenReg(t) ? kernelAlias(t) : hostCopyForTask(t);
}

// The argument returned for a write-aliased return: the argument with the same alias set.
const c10::IValue& aliasedArgument(const c10::FunctionSchema& schema, size_t returnIndex,
                                   c10::ArrayRef<c10::IValue> args) {
  const auto* alias = schema.returns()[returnIndex].alias_info();
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* argAlias = schema.arguments()[i].alias_info();
    if (argAlias != nullptr && argAlias->beforeSets() == alias->beforeSets()) return args[i];
  }
  TORCH_INTERNAL_ASSERT(false, OR_DEVICE_NAME ": no argument aliases return ", returnIndex, " of ",
                        schema.name());
}

}  // namespace

c10::IValue taskArgument(const c10::IValue& arg) {
  if (arg.isTensor()) return taskTensor(arg.toTensor());
  if (arg.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : arg.toTensorList()) out.push_back(taskTensor(t));
    return out;
  }
  if (arg.isList() && arg.toListRef().size() > 0 && isTensorType(arg.toList().elementType())) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& element : arg.toListRef()) {
      out.push_back(element.isTensor() ? std::optional<at::Tensor>(taskTensor(element.toTensor()))
                                       : std::nullopt);
    }
    return out;
  }
  return arg;
}

void pushResults(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                 c10::ArrayRef<c10::IValue> args, std::span<c10::IValue> fresh) {
  // The write-aliased arguments are read from `args` before the stack drops them: `args` may be
  // a view of the stack's own slots.
  c10::SmallVector<c10::IValue, 4> results;
  size_t next = 0;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      results.push_back(aliasedArgument(schema, i, args));
    } else {
      TORCH_INTERNAL_ASSERT(next < fresh.size(), OR_DEVICE_NAME ": fewer results than returns");
      results.push_back(std::move(fresh[next++]));
    }
  }
  torch::jit::drop(*stack, args.size());
  for (c10::IValue& result : results) stack->push_back(std::move(result));
}

}  // namespace openreg::engine
