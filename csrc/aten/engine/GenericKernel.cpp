// The generic execution engine: how an ATen operator without an openreg kernel runs on openreg.
//
// Note [Generic engine]
// Registered as the PrivateUse1 backend fallback, so every operator without a kernel of its own
// comes here, boxed. For a call:
//  1. The device: every openreg tensor argument must be on one device; CPU tensors are accepted
//     only as 0-dim scalars, as TensorIterator accepts them.
//  2. Asynchronous path. The operator runs on Meta copies of its arguments: this computes output
//     shapes, strides and dtypes without touching data, and raises shape and dtype errors at the
//     call site, as the CPU would. Outputs are allocated on the device (caching allocator,
//     current stream). One task is queued on the current stream that runs ATen's own CPU kernel
//     on kernel-window aliases of the arguments (KernelAlias.h): through the operator's .out
//     overload, writing straight into the outputs' device memory, when there is one; else the
//     functional kernel, whose results are copied into the outputs. In-place and out= operators
//     write into their arguments' aliases directly. The host returns at once.
//  3. Synchronizing path, when the result cannot be known ahead: no Meta kernel (data-dependent
//     shapes: nonzero, unique, masked_select, boolean indexing), results that live on the host
//     (equal, is_nonzero, ...), and random operators (see below). The stream is synchronized,
//     the same CPU kernel runs on the aliases on the calling thread, and new results are copied
//     to the device.
//  4. Random operators take the device generator's state in program order at the call: the
//     state moves into a CPU generator for the kernel and back, so the numbers equal the CPU's
//     for the same seed.
//  5. View operators without a kernel of their own go to the classic copying fallback (they are
//     registered natively in Minimal.cpp where ATen has a generic implementation).
// Errors a kernel raises inside a task surface at the next synchronization, naming the operator
// (see Note [Task errors] in runtime/src/Stream.cpp).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/native/CPUFallback.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <torch/library.h>
#include <openreg/task.hpp>

#include <mutex>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/engine/Ledger.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/Stream.h"

namespace openreg::engine {
namespace {

constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

bool isOpenReg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

bool isGeneratorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::GeneratorType) return true;
  auto optional = type->cast<c10::OptionalType>();
  return optional && optional->getElementType()->kind() == c10::TypeKind::GeneratorType;
}

bool isTensorType(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (auto optional = type->cast<c10::OptionalType>())
    return isTensorType(optional->getElementType());
  if (auto list = type->cast<c10::ListType>()) return isTensorType(list->getElementType());
  return false;
}

// What the schema says about an operator, computed once per operator.
struct OpTraits {
  bool view = false;        // returns an alias it does not write
  bool mutates = false;     // writes arguments (in-place, out=), and returns only those
  bool random = false;      // takes a Generator
  bool hostResult = false;  // returns something other than tensors
  std::optional<c10::OperatorHandle> outVariant;  // functional operators: the matching .out
  int metaWorks = -1;  // learned at the first call: -1 unknown, 0 no Meta kernel, 1 yes
};

std::optional<c10::OperatorHandle> findOutVariant(const c10::FunctionSchema& schema) {
  const std::string& overload = schema.overload_name();
  for (const std::string& name :
       {overload.empty() ? std::string("out") : overload + "_out", std::string("out")}) {
    auto handle = c10::Dispatcher::singleton().findSchema({schema.name(), name});
    if (!handle) continue;
    const auto& out = handle->schema();
    const size_t nArgs = schema.arguments().size();
    if (out.arguments().size() != nArgs + schema.returns().size()) continue;
    bool matches = true;
    for (size_t i = 0; i < nArgs && matches; ++i) {
      matches = out.arguments()[i].name() == schema.arguments()[i].name() &&
                *out.arguments()[i].type() == *schema.arguments()[i].type();
    }
    for (size_t i = nArgs; i < out.arguments().size() && matches; ++i) {
      const auto* alias = out.arguments()[i].alias_info();
      matches = alias != nullptr && alias->isWrite() &&
                out.arguments()[i].type()->kind() == c10::TypeKind::TensorType;
    }
    if (matches) return handle;
  }
  return std::nullopt;
}

OpTraits computeTraits(const c10::FunctionSchema& schema) {
  OpTraits traits;
  for (const auto& arg : schema.arguments()) {
    if (arg.alias_info() != nullptr && arg.alias_info()->isWrite()) traits.mutates = true;
    if (isGeneratorType(arg.type())) traits.random = true;
  }
  bool newTensors = false;
  for (const auto& ret : schema.returns()) {
    if (!isTensorType(ret.type())) traits.hostResult = true;
    if (ret.alias_info() == nullptr) {
      newTensors = newTensors || isTensorType(ret.type());
    } else if (!ret.alias_info()->isWrite()) {
      traits.view = true;
    }
  }
  // Operators that write arguments and also return new tensors (native_batch_norm updating its
  // running statistics) take the functional route: new results are allocated, written arguments
  // are written through their aliases.
  if (newTensors) traits.mutates = false;
  if (!traits.mutates && !traits.view && !traits.hostResult) {
    traits.outVariant = findOutVariant(schema);
  }
  return traits;
}

OpTraits& traitsFor(const c10::OperatorHandle& op) {
  static std::mutex mutex;
  static std::unordered_map<const c10::FunctionSchema*, OpTraits> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const c10::FunctionSchema* key = &op.schema();
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, computeTraits(op.schema())).first;
  return it->second;
}

// Applies `fn` to every tensor inside an argument (a tensor, a list, a list of optionals).
template <class F>
void forEachTensor(const c10::IValue& value, F&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

// Rebuilds an argument with every openreg tensor replaced by fn(tensor).
template <class F>
c10::IValue mapTensors(const c10::IValue& value, F&& fn) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return isOpenReg(t) ? c10::IValue(fn(t)) : value;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(isOpenReg(t) ? fn(t) : t);
    return out;
  }
  if (value.isList() && value.toListRef().size() > 0) {
    const auto elementType = value.toList().elementType();
    if (isTensorType(elementType)) {
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor() && isOpenReg(element.toTensor())) {
          out.push_back(fn(element.toTensor()));
        } else {
          out.push_back(element.isTensor() ? std::optional<at::Tensor>(element.toTensor())
                                           : std::nullopt);
        }
      }
      return out;
    }
  }
  return value;
}

// [marker: engine-device-check]
c10::Device findDevice(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> device;
  std::optional<c10::Device> other;
  for (const c10::IValue& arg : args) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (isOpenReg(t)) {
        if (!device)
          device = t.device();
        else if (t.device() != *device && !other)
          other = t.device();
      } else if (!(t.device().is_cpu() && t.dim() == 0) && !other) {
        other = t.device();
      }
    });
  }
  if (!device) return c10::Device(c10::DeviceType::PrivateUse1, current_device());
  TORCH_CHECK(!other,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              *device, " and ", *other, "! (openreg: ", op.schema().operator_name(), ")");
  return *device;
}

// An argument as a task may hold it: see Note [Tasks hold no Python-visible tensor] in
// KernelAlias.h. Device tensors become kernel aliases; CPU tensors (0-dim scalars, the only ones
// findDevice lets through) become fresh clones.
at::Tensor taskTensor(const at::Tensor& t) {
  if (!t.defined()) return t;
  return isOpenReg(t) ? kernelAlias(t) : t.clone();
}

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

// The argument returned for a write-aliased return: the argument with the same alias set.
c10::IValue aliasedArgument(const c10::FunctionSchema& schema, size_t returnIndex,
                            c10::ArrayRef<c10::IValue> args) {
  const auto* alias = schema.returns()[returnIndex].alias_info();
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* argAlias = schema.arguments()[i].alias_info();
    if (argAlias != nullptr && argAlias->beforeSets() == alias->beforeSets()) return args[i];
  }
  TORCH_INTERNAL_ASSERT(false, "openreg: no argument aliases return ", returnIndex, " of ",
                        schema.name());
}

void copyingFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* why) {
  const std::string name = c10::toString(op.schema().operator_name());
  checkCopyingFallback(name, why);
  count(Path::Copying);
  int64_t bytes = 0;
  for (const c10::IValue& arg : torch::jit::last(*stack, op.schema().arguments().size())) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      if (isOpenReg(t)) bytes += static_cast<int64_t>(t.nbytes());
    });
  }
  at::native::cpu_fallback(op, stack);
  for (const c10::IValue& ret : torch::jit::last(*stack, op.schema().returns().size())) {
    forEachTensor(ret, [&](const at::Tensor& t) {
      if (isOpenReg(t)) bytes += static_cast<int64_t>(t.nbytes());
    });
  }
  countCopiedBytes(bytes);
}

// Replaces the arguments on `stack` by the operator's results: new tensors, or for write-aliased
// returns the arguments themselves.
void pushResults(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                 const std::vector<c10::IValue>& args, std::vector<c10::IValue> fresh) {
  torch::jit::drop(*stack, args.size());
  size_t next = 0;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      stack->push_back(aliasedArgument(schema, i, args));
    } else {
      stack->push_back(std::move(fresh.at(next++)));
    }
  }
}

// [marker: engine-async]
// Returns false (and changes nothing) when the operator has no Meta kernel.
bool runAsync(const c10::OperatorHandle& op, OpTraits& traits, torch::jit::Stack* stack,
              c10::Device device) {
  const auto& schema = op.schema();
  const size_t nArgs = schema.arguments().size();
  const std::vector<c10::IValue> args(stack->end() - nArgs, stack->end());

  // 1. Shapes, strides, dtypes and call-site errors from the Meta kernel.
  torch::jit::Stack meta;
  meta.reserve(nArgs);
  for (const c10::IValue& arg : args) meta.push_back(mapTensors(arg, metaLike));
  const std::vector<c10::IValue> metaArgs = meta;  // read back resized out= shapes afterwards
  try {
    op.callBoxed(&meta);
  } catch (const c10::NotImplementedError&) {
    traits.metaWorks = 0;  // no Meta kernel at all: remember
    return false;
  } catch (const std::exception& e) {
    // A Meta kernel written in Python that cannot answer for these inputs (data-dependent shapes:
    // nonzero, boolean indexing) raises Python's NotImplementedError. Not remembered: the same
    // operator may answer for other inputs (index with integer indices).
    if (std::string_view(e.what()).rfind("NotImplementedError", 0) == 0) return false;
    throw;
  }
  traits.metaWorks = 1;

  // 2. Outputs: resize written arguments the Meta kernel resized; allocate new results.
  for (size_t i = 0; i < nArgs; ++i) {
    const auto* alias = schema.arguments()[i].alias_info();
    if (alias == nullptr || !alias->isWrite() || !args[i].isTensor() || !metaArgs[i].isTensor())
      continue;
    const at::Tensor& target = args[i].toTensor();
    const at::Tensor& shaped = metaArgs[i].toTensor();
    if (target.sizes() != shaped.sizes()) target.resize_(shaped.sizes());
    if (target.strides() != shaped.strides()) target.as_strided_(shaped.sizes(), shaped.strides());
  }
  std::vector<c10::IValue> fresh;   // new results, in return order (write-aliased ones skipped)
  std::vector<at::Tensor> outputs;  // every new output tensor, in order
  auto allocate = [&](const at::Tensor& m) {
    at::Tensor out = at::empty_strided(m.sizes(), m.strides(), m.options().device(device));
    outputs.push_back(out);
    return out;
  };
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    const c10::IValue& m = meta.at(i);
    if (m.isTensor()) {
      fresh.emplace_back(allocate(m.toTensor()));
    } else if (m.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : m.toTensorList()) list.push_back(allocate(t));
      fresh.emplace_back(list);
    } else {
      fresh.push_back(m);
    }
  }

  // 3. One task: the CPU kernel on kernel-window aliases, writing into device memory.
  std::vector<c10::IValue> taskArgs;
  taskArgs.reserve(nArgs + outputs.size());
  for (const c10::IValue& arg : args) taskArgs.push_back(taskArgument(arg));
  std::vector<at::Tensor> outputAliases;
  for (const at::Tensor& out : outputs) outputAliases.push_back(kernelAlias(out));
  const std::optional<c10::OperatorHandle> outOp = traits.outVariant;
  if (outOp) {
    for (const at::Tensor& alias : outputAliases) taskArgs.emplace_back(alias);
  }
  const bool copyResults = !outOp && !outputs.empty();
  OPENREG_CHECK(openreg::launch(
      getCurrentOpenRegStream(device.index()).stream(),
      [op, outOp, taskArgs = std::move(taskArgs), outputAliases = std::move(outputAliases),
       copyResults]() mutable {
        try {
          torch::jit::Stack s(std::make_move_iterator(taskArgs.begin()),
                              std::make_move_iterator(taskArgs.end()));
          (outOp ? *outOp : op).redispatchBoxed(kCpuKeys, &s);
          if (copyResults) {
            size_t next = 0;
            for (const c10::IValue& r : s) {
              forEachTensor(r, [&](const at::Tensor& t) {
                if (next < outputAliases.size()) outputAliases[next++].copy_(t);
              });
            }
          }
        } catch (const std::exception& e) {
          throw std::runtime_error(c10::toString(op.schema().operator_name()) + ": " + e.what());
        }
      }));

  pushResults(schema, stack, args, std::move(fresh));
  return true;
}

// [marker: engine-sync]
void runSync(const c10::OperatorHandle& op, const OpTraits& traits, torch::jit::Stack* stack,
             c10::Device device) {
  const auto& schema = op.schema();
  const size_t nArgs = schema.arguments().size();
  const std::vector<c10::IValue> args(stack->end() - nArgs, stack->end());
  OPENREG_CHECK(orStreamSynchronize(getCurrentOpenRegStream(device.index()).stream()));

  torch::jit::Stack s;
  s.reserve(nArgs);
  for (const c10::IValue& arg : args) s.push_back(mapTensors(arg, kernelAlias));

  // Random operators: the device generator's state, in program order, through a CPU generator.
  std::optional<at::Generator> deviceGenerator;
  std::optional<at::Generator> cpuGenerator;
  for (size_t i = 0; i < nArgs && traits.random; ++i) {
    if (!isGeneratorType(schema.arguments()[i].type())) continue;
    deviceGenerator =
        args[i].isNone() ? openreg::getDefaultGenerator(device.index()) : args[i].toGenerator();
    TORCH_CHECK(deviceGenerator->device().type() == c10::DeviceType::PrivateUse1,
                "openreg: ", schema.operator_name(),
                " on an openreg tensor needs an openreg generator, got one of ",
                deviceGenerator->device());
    cpuGenerator = at::make_generator<at::CPUGeneratorImpl>();
    s[i] = *cpuGenerator;
  }
  std::unique_lock<std::mutex> generatorLock;
  if (deviceGenerator) {
    generatorLock = std::unique_lock<std::mutex>(deviceGenerator->mutex());
    cpuGenerator->set_state(deviceGenerator->get_state());
  }
  op.redispatchBoxed(kCpuKeys, &s);
  if (deviceGenerator) deviceGenerator->set_state(cpuGenerator->get_state());

  // New tensor results live in host memory: copy them to the device.
  std::vector<c10::IValue> fresh;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    const c10::IValue& r = s.at(i);
    if (r.isTensor()) {
      fresh.emplace_back(r.toTensor().to(device));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : r.toTensorList()) list.push_back(t.to(device));
      fresh.emplace_back(list);
    } else {
      fresh.push_back(r);
    }
  }
  pushResults(schema, stack, args, std::move(fresh));
}

// [marker: engine-fallback]
void genericKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpTraits& traits = traitsFor(op);
  const auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const c10::Device device = findDevice(op, args);
  if (traits.view) {
    copyingFallback(op, stack, "a view operator without an openreg kernel");
    return;
  }
  DeviceScope scope(device.index());
  if (!traits.random && !traits.hostResult && traits.metaWorks != 0 &&
      runAsync(op, traits, stack, device)) {
    count(Path::Async);
    return;
  }
  runSync(op, traits, stack, device);
  count(Path::Sync);
}

}  // namespace

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&genericKernel>());
}

// [marker: engine-explicit-registrations]
// Operators with a fused CPU kernel and also a CompositeExplicitAutograd kernel, which PyTorch
// uses as the "default backend kernel" for PrivateUse1 instead of the fallback: a decomposition
// whose rounding differs from the CPU kernel's. Registering the engine for them runs the CPU
// kernel itself, so results stay bitwise equal to the CPU. The list is every aten operator in
// torch 2.13.0 with a CPU kernel and a CompositeExplicitAutograd kernel (tests/test_engine.py
// re-derives it from the dispatcher and checks it).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name :
       {"native_layer_norm", "native_group_norm", "addr", "addr.out", "_stack", "_stack.out",
        "any.dims", "any.dims_out", "all.dims", "all.dims_out", "linalg__powsum"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&genericKernel>());
  }
}

}  // namespace openreg::engine
