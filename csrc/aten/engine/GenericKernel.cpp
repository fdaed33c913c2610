// The generic execution engine: how an ATen operator without an openreg kernel runs on openreg.
//
// Note [Generic engine]
// Registered as the PrivateUse1 backend fallback, so every operator without a kernel of its own
// comes here, boxed. For a call:
//  1. The device: every openreg tensor argument must be on one device; CPU tensors are accepted
//     only as 0-dim scalars, as TensorIterator accepts them. A quantized dtype is refused when the
//     Meta kernel is asked or the synchronizing path runs (Note [No quantized tensors] in
//     Quantized.h).
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
//     (equal, is_nonzero, ...), operators of other namespaces, whose CPU kernels may be Python
//     (csrc/aten/engine/OpTraits.cpp#engine-foreign-operators). The stream is synchronized,
//     the same CPU kernel runs on the aliases on the calling thread, and new results are copied
//     to the device.
//  4. Random operators take the device generator's state in program order at the call: the
//     state moves into a CPU generator for the kernel and back, so the numbers equal the CPU's
//     for the same seed.
//  5. View operators without a kernel of their own go to the classic copying fallback (they are
//     registered natively in Minimal.cpp where ATen has a generic implementation).
// Errors a kernel raises inside a task reach whoever reads what it wrote, and the next
// synchronization, as the exception the CPU raises, naming the operator (see Note [Task errors]
// in runtime/src/Stream.cpp and docs/errors.md).
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <torch/library.h>
#include <openreg/task.hpp>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/engine/Arguments.h"
#include "aten/engine/CopyingFallback.h"
#include "aten/engine/GenericKernel.h"
#include "aten/engine/Ledger.h"
#include "aten/engine/OpTraits.h"
#include "aten/engine/Quantized.h"
#include "aten/engine/ShapeCache.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Generator.h"
#include "core/Stream.h"

namespace openreg::engine {
namespace {

constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

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

// [marker: engine-cpu-indices]
// Indexing operators (index, index_put_: a Tensor?[] of indices) accept CPU index tensors with
// openreg data, as CUDA does: the indices are copied to the data's device first.
// Python's indexing passes the dimensions it slices as undefined tensors, not as None
// (x[:, :, [0, 3]]).
void moveCpuIndices(const OpTraits& traits, torch::jit::Stack* stack, size_t nArgs) {
  auto isCpu = [](const c10::IValue& element) {
    return element.isTensor() && element.toTensor().defined() &&
           element.toTensor().device().is_cpu();
  };
  for (size_t index : traits.indexLists) {
    c10::IValue& arg = (*stack)[stack->size() - nArgs + index];
    if (!arg.isList()) continue;
    const auto elements = arg.toListRef();
    if (std::none_of(elements.begin(), elements.end(), isCpu)) continue;
    std::optional<c10::Device> device;
    for (const c10::IValue& other : torch::jit::last(*stack, nArgs)) {
      forEachTensor(other, [&](const at::Tensor& t) {
        if (!device && isOpenReg(t)) device = t.device();
      });
    }
    if (!device) return;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& element : elements) {
      if (!element.isTensor() || !element.toTensor().defined()) {
        moved.push_back(std::nullopt);
      } else {
        const at::Tensor& t = element.toTensor();
        moved.push_back(t.device().is_cpu() ? t.to(*device) : t);
      }
    }
    arg = moved;
  }
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

// An argument as an asynchronous task carries it: a device tensor as the description of its kernel
// alias (made into a tensor on the worker: the host allocates no tensor for it), anything else as
// taskArgument() makes it.
struct TaskArgument {
  c10::IValue value;
  std::optional<KernelAliasSpec> alias;
};

// [marker: engine-view-bits]
// A kernel may flip an output's conjugate or negative bit instead of writing the values
// (linalg_lu_solve with left=False conjugates its result that way). On the CPU the caller's tensor
// carries the flipped bit; here the kernel flipped it on an alias, and the device tensor keeps its
// own bits. So the flip is applied to the memory instead: conjugated or negated in place, the
// device tensor then reads the values the kernel meant.
void keepViewBits(const at::Tensor& alias, const KernelAliasSpec& spec) {
  const bool conj = alias.is_conj() != spec.conj;
  const bool neg = alias.is_neg() != spec.neg;
  if (!conj && !neg) return;
  KernelAliasSpec plain = spec;
  plain.conj = plain.neg = false;
  at::Tensor memory = makeKernelAlias(plain);
  if (conj) memory.conj_physical_();
  if (neg) memory.neg_();
}

// Note [Regrown outputs]
// Some CPU kernels grow an output on their way and shrink it back: mse_loss.out computes the
// elementwise loss into its result, then reduces into it. A task's aliases are resizable with the
// CPU allocator (makeKernelAlias), so such a kernel moves the alias to host memory instead of
// failing. Afterwards its final values, of the shape the Meta kernel announced, are copied back to
// the device memory.
// Others restride an output in place: max_unpool2d.out gives a channels-last input's output the
// channels-last layout (resize_ with a memory format), where the Meta kernel announced a
// contiguous one. The values then sit in the device memory in the kernel's layout, not the
// device tensor's: they are read out and written back in the device tensor's layout.
// [marker: engine-regrown-outputs]
bool keptLayout(const at::Tensor& alias, const KernelAliasSpec& spec) {
  return alias.storage().data() == spec.data && alias.storage_offset() == 0 &&
         (alias.numel() == 0 || alias.strides() == c10::IntArrayRef(spec.strides));
}

void keepKernelChanges(const c10::OperatorHandle& op, const at::Tensor& alias,
                       const KernelAliasSpec& spec) {
  if (keptLayout(alias, spec)) {
    keepViewBits(alias, spec);
    return;
  }
  TORCH_CHECK(alias.sizes() == c10::IntArrayRef(spec.sizes), "openreg: the CPU kernel of ",
              op.schema().operator_name(), " resized an output to ", alias.sizes(),
              " where its Meta kernel announced ", c10::IntArrayRef(spec.sizes));
  // Restrided in place, the alias reads the memory the copy writes: read it out first.
  const bool inPlace = alias.storage().data() == spec.data;
  makeKernelAlias(spec).copy_(inPlace ? alias.clone() : alias);
}

// A functional kernel's result into its output. The Meta kernel decided the output's shape;
// where the CPU kernel returns an empty tensor instead (native_batch_norm's saved statistics in
// evaluation mode, which it does not compute), the output is zeroed. Any other disagreement is
// an error naming both shapes.
void copyResult(const at::Tensor& result, const at::Tensor& output) {
  if (result.sizes() == output.sizes()) {
    output.copy_(result);
  } else if (result.numel() == 0) {
    output.zero_();
  } else {
    TORCH_CHECK(false, "openreg: the CPU kernel returned a result of shape ", result.sizes(),
                " where the Meta kernel announced ", output.sizes());
  }
}

// Collects the warnings raised on this thread while it is installed; release() passes them on.
struct HeldWarnings : c10::WarningHandler {
  std::vector<c10::Warning> warnings;
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  void release() {
    for (const c10::Warning& warning : warnings) c10::warn(warning);
    warnings.clear();
  }
};

// [marker: engine-task]
// What the asynchronous path queues: the CPU kernel on kernel-window aliases. With an .out
// overload, the kernel writes straight into the outputs' device memory.
// Note [Unfaithful out kernels]
// Some CPU .out kernels assume more of their out tensors than the Meta shapes give them:
// binary_cross_entropy.out computes elementwise into its out, then reduces into it, and gets a
// wrong value from an out of the reduced shape; native_layer_norm.out refuses the float
// statistics the Meta kernel announces for half inputs. Such a kernel moves an output alias to host
// memory (Note [Regrown outputs]) or throws; the task then runs the functional kernel instead,
// copies its results, and the operator takes that route from then on.
struct AsyncTask {
  c10::OperatorHandle op;
  std::optional<c10::OperatorHandle> outOp;
  OpTraits* traits;
  // Inline storage for the common sizes: the host builds a task on every call, and a heap
  // allocation per vector showed in its profile.
  c10::SmallVector<TaskArgument, 6> args;
  c10::SmallVector<KernelAliasSpec, 2> outputs;  // the new outputs
  c10::SmallVector<std::pair<size_t, size_t>, 2>
      slots;                // per output: its return index, list position
  at::Generator generator;  // random operators: the device generator
  int generatorIndex;

  void operator()() {
    try {
      // Note [Tasks run below autograd] in NativeKernel.h
      at::AutoDispatchBelowADInplaceOrView guard;
      std::vector<std::pair<at::Tensor, const KernelAliasSpec*>> aliases;
      torch::jit::Stack inputs;
      inputs.reserve(args.size() + outputs.size());
      for (TaskArgument& arg : args) {
        if (arg.alias) {
          aliases.emplace_back(makeKernelAlias(*arg.alias), &*arg.alias);
          inputs.emplace_back(aliases.back().first);
        } else {
          inputs.push_back(std::move(arg.value));
        }
      }
      if (generator.defined()) {
        generator.get<GeneratorImpl>()->runWithCpuGenerator([&](const at::Generator& cpu) {
          inputs[generatorIndex] = cpu;
          run(inputs, aliases);
        });
      } else {
        run(inputs, aliases);
      }
    } catch (...) {
      rethrowAsTaskError(c10::toString(op.schema().operator_name()));
    }
  }

  // [marker: engine-task-accesses]
  // What the task reads and writes (Note [Poisoned memory] in runtime/src/Poison.h): every device
  // tensor argument is read, except out= arguments; written arguments and new outputs are
  // written. Asked for only when some memory is poisoned or the task failed.
  void accesses(AccessList& out) const {
    const auto& arguments = op.schema().arguments();
    for (size_t i = 0; i < args.size(); ++i) {
      const auto* alias = arguments[i].alias_info();
      const bool write = alias != nullptr && alias->isWrite();
      const bool read = !arguments[i].is_out();
      if (args[i].alias) {
        out.push_back(memoryAccess(*args[i].alias, read, write));
      } else if (!args[i].value.isTensor()) {  // lists hold kernel aliases; CPU scalars are clones
        forEachTensor(args[i].value,
                      [&](const at::Tensor& t) { out.push_back(memoryAccess(t, read, write)); });
      }
    }
    for (const KernelAliasSpec& spec : outputs) out.push_back(memoryAccess(spec, false, true));
  }

 private:
  void run(const torch::jit::Stack& inputs,
           std::vector<std::pair<at::Tensor, const KernelAliasSpec*>>& aliases) {
    if (outOp) {
      torch::jit::Stack s = inputs;
      const size_t firstOutput = aliases.size();
      for (const KernelAliasSpec& spec : outputs) {
        aliases.emplace_back(makeKernelAlias(spec), &spec);
        s.emplace_back(aliases.back().first);
      }
      // The .out kernel's warnings wait for its verdict: one that regrows its output warns
      // about resizing it ("An output with one or more elements was resized"), which the
      // caller's call did not do; the functional kernel then runs and gives its own.
      HeldWarnings held;
      try {
        c10::WarningUtils::WarningHandlerGuard guard(&held);
        outOp->redispatchBoxed(kCpuKeys, &s);
      } catch (const std::exception&) {
        // An .out kernel refusing outputs of the Meta dtypes (native_layer_norm.out for half
        // inputs): the functional kernel decides. A random kernel is not run twice.
        if (generator.defined()) throw;
        traits->outVariantFaithful = false;
        aliases.resize(firstOutput);
        runFunctional(inputs, aliases);
        return;
      }
      bool regrown = false;
      for (size_t i = firstOutput; i < aliases.size(); ++i) {
        regrown = regrown || !keptLayout(aliases[i].first, *aliases[i].second);
      }
      // A random kernel is not run twice: that would draw twice.
      if (!regrown || generator.defined()) {
        held.release();
        for (const auto& [alias, spec] : aliases) keepKernelChanges(op, alias, *spec);
        return;
      }
      traits->outVariantFaithful = false;  // Note [Unfaithful out kernels]
      aliases.resize(firstOutput);
    }
    runFunctional(inputs, aliases);
  }

  void runFunctional(const torch::jit::Stack& inputs,
                     std::vector<std::pair<at::Tensor, const KernelAliasSpec*>>& aliases) {
    torch::jit::Stack s = inputs;
    HeldWarnings held;  // as for the .out kernel above: a regrown argument's warning is dropped
    {
      c10::WarningUtils::WarningHandlerGuard guard(&held);
      op.redispatchBoxed(kCpuKeys, &s);
    }
    bool regrown = false;
    for (const auto& [alias, spec] : aliases) {
      regrown = regrown || !keptLayout(alias, *spec);
      keepKernelChanges(op, alias, *spec);
    }
    if (!regrown) held.release();
    // Each output from the return it stands for: an undefined result (a gradient the kernel did
    // not compute, for a missing weight) must not shift the others.
    for (size_t k = 0; k < outputs.size(); ++k) {
      const c10::IValue& r = s.at(slots[k].first);
      at::Tensor result;
      if (r.isTensor()) {
        result = r.toTensor();
      } else if (r.isTensorList()) {
        result = r.toTensorList().get(slots[k].second);
      }
      at::Tensor output = makeKernelAlias(outputs[k]);
      if (result.defined()) {
        copyResult(result, output);
      } else {
        output.zero_();
      }
    }
  }
};

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

// Replaces the arguments on `stack` by the operator's results: new tensors, or for write-aliased
// returns the arguments themselves.
void pushResults(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                 c10::ArrayRef<c10::IValue> args, std::span<c10::IValue> fresh) {
  torch::jit::drop(*stack, args.size());
  size_t next = 0;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) {
      stack->push_back(aliasedArgument(schema, i, args));
    } else {
      TORCH_INTERNAL_ASSERT(next < fresh.size(), "openreg: fewer results than returns");
      stack->push_back(std::move(fresh[next++]));
    }
  }
}

// The openreg generator a random operator on `device` uses: the one passed, or the device's
// default. A generator of another device type is the caller's error.
at::Generator deviceGenerator(const c10::OperatorHandle& op, const c10::IValue& arg,
                              c10::Device device) {
  at::Generator generator = arg.isNone() ? getDefaultGenerator(device.index()) : arg.toGenerator();
  TORCH_CHECK(generator.device().type() == c10::DeviceType::PrivateUse1,
              "openreg: ", op.schema().operator_name(),
              " on an openreg tensor needs an openreg generator, got one of ", generator.device());
  return generator;
}

TensorShape shapeOf(const at::Tensor& t) {
  TensorShape shape;
  if (!t.defined()) return shape;
  shape.sizes.assign(t.sizes().begin(), t.sizes().end());
  shape.strides.assign(t.strides().begin(), t.strides().end());
  shape.dtype = t.scalar_type();
  return shape;
}

// The results of one call (Meta tensors, or the CPU kernel's: see Note [Shapes from the CPU
// kernel]) as the shapes an answer keeps, one per return that is not a written argument.
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

// The arguments of a call asked of another device (Meta for shapes, the CPU for empty inputs):
// every openreg tensor replaced by standIn(tensor), and a factory's device argument moved too
// (asked on openreg, the call would come straight back to this engine, without end:
// tril_indices(..., device="openreg")).
template <class F>
torch::jit::Stack standIns(c10::ArrayRef<c10::IValue> args, c10::DeviceType target, F&& standIn) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const c10::IValue& arg : args) {
    if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      stack.emplace_back(c10::Device(target));
    } else {
      stack.push_back(mapTensors(arg, standIn));
    }
  }
  return stack;
}

// The Meta kernel's answer for one call (Note [Shape cache]); nullptr when the operator has no
// Meta kernel at all. Shape, dtype and device errors propagate: they are the call site's errors.
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

// The CPU kernel on the calling thread: its error, raised at the call, keeps the CPU's type and
// names the device and the operator.
void runCpuKernelNamingDevice(const c10::OperatorHandle& op, torch::jit::Stack* stack,
                              c10::Device device) {
  try {
    op.redispatchBoxed(kCpuKeys, stack);
  } catch (const c10::Error&) {
    rethrowNamingDevice(device, c10::toString(op.schema().operator_name()));
  }
}

// [marker: engine-empty-inputs]
// Note [Errors of empty inputs]
// Some CPU kernels refuse inputs for their shapes alone where the Meta kernel accepts them:
// torch.empty(0, 3).max() raises at once on the CPU ("Expected reduction dim to be specified"),
// while its Meta kernel answers a 0-dim result. Queued, the error would surface later, in another
// call. When every device tensor of a call is empty, running the CPU kernel costs nothing: so a
// signature seen for the first time (a shape-cache miss) runs it on empty CPU tensors of the same
// layout, and its error, of the CPU's type, is raised at the call. Random operators are not run
// twice. Calls with data are not covered: their CPU kernels' checks depend on values.
void checkEmptyOnCpu(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                     c10::Device device) {
  bool any = false, allEmpty = true;
  for (const c10::IValue& arg : args) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      if (!t.defined() || !isOpenReg(t)) return;
      any = true;
      allEmpty = allEmpty && t.numel() == 0;
    });
  }
  if (!any || !allEmpty) return;
  torch::jit::Stack s = standIns(args, c10::kCPU, [](const at::Tensor& t) {
    return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kCPU));
  });
  at::AutoDispatchBelowADInplaceOrView guard;
  runCpuKernelNamingDevice(op, &s, device);
}

// [marker: engine-async]
// Returns false (and changes nothing) when there are no shapes ahead: no Meta kernel, or one that
// declines these inputs.
bool runAsync(const c10::OperatorHandle& op, OpTraits& traits, torch::jit::Stack* stack,
              c10::Device device) {
  const auto& schema = op.schema();
  const size_t nArgs = schema.arguments().size();
  const c10::SmallVector<c10::IValue, 8> args(stack->end() - nArgs, stack->end());

  // 1. Shapes, strides, dtypes and call-site errors: remembered, or from the Meta kernel.
  Signature signature;
  const bool keyed = signature.build(args);
  std::shared_ptr<const MetaAnswer> answer = keyed ? traits.shapes.find(signature) : nullptr;
  if (!answer) {
    if (traits.shapesFromCpu) return false;  // learned on the synchronizing path, not asked
    answer = askMeta(op, traits, args);
    if (!answer) return false;
    if (!answer->declined && traits.generatorIndex < 0) checkEmptyOnCpu(op, args, device);
    if (keyed && answer->remember) traits.shapes.insert(std::move(signature), answer);
  }
  if (answer->declined) return false;

  // 2. Outputs: reshape written arguments as the Meta kernel did; allocate new results.
  for (const auto& [index, shape] : answer->written) {
    const at::Tensor& target = args[index].toTensor();
    if (target.sizes() != c10::IntArrayRef(shape.sizes)) target.resize_(shape.sizes);
    if (target.strides() != c10::IntArrayRef(shape.strides))
      target.as_strided_(shape.sizes, shape.strides);
  }
  c10::SmallVector<c10::IValue, 4> fresh;   // new results, in return order (write-aliased skipped)
  c10::SmallVector<at::Tensor, 4> outputs;  // every new output tensor, in order
  c10::SmallVector<std::pair<size_t, size_t>, 2> slots;  // per output: return index, list position
  auto allocate = [&](const TensorShape& shape, size_t returnIndex, size_t position) {
    if (shape.dtype == c10::ScalarType::Undefined) return at::Tensor();
    at::Tensor out = at::empty_strided(shape.sizes, shape.strides,
                                       at::TensorOptions().dtype(shape.dtype).device(device));
    outputs.push_back(out);
    slots.emplace_back(returnIndex, position);
    return out;
  };
  c10::SmallVector<size_t, 4> newReturns;  // indices of the returns that are not written arguments
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias == nullptr || !alias->isWrite()) newReturns.push_back(i);
  }
  for (size_t k = 0; k < answer->results.size(); ++k) {
    const MetaAnswer::Result& result = answer->results[k];
    switch (result.kind) {
      case MetaAnswer::Result::Kind::Tensor:
        fresh.emplace_back(allocate(result.tensors.front(), newReturns.at(k), 0));
        break;
      case MetaAnswer::Result::Kind::TensorList: {
        c10::List<at::Tensor> list;
        for (size_t j = 0; j < result.tensors.size(); ++j)
          list.push_back(allocate(result.tensors[j], newReturns.at(k), j));
        fresh.emplace_back(list);
        break;
      }
      case MetaAnswer::Result::Kind::Value:
        fresh.push_back(result.value);
        break;
    }
  }

  // 3. One task: the CPU kernel on kernel-window aliases, writing into device memory. Device
  //    tensors travel as alias descriptions, made into tensors on the worker.
  c10::SmallVector<TaskArgument, 6> taskArgs;
  taskArgs.reserve(nArgs + outputs.size());
  for (const c10::IValue& arg : args) {
    if (arg.isTensor() && isOpenReg(arg.toTensor())) {
      taskArgs.push_back({c10::IValue(), describeKernelAlias(arg.toTensor())});
    } else {
      taskArgs.push_back({taskArgument(arg), std::nullopt});
    }
  }
  AsyncTask task{
      op,
      traits.outVariantFaithful && answer->everyResultATensor ? traits.outVariant : std::nullopt,
      &traits,
      std::move(taskArgs),
      /*outputs=*/{},
      /*slots=*/{},
      /*generator=*/{},
      /*generatorIndex=*/-1};
  for (const at::Tensor& out : outputs) task.outputs.push_back(describeKernelAlias(out));
  task.slots = std::move(slots);
  // Random operators: the generator is used on the stream, in program order (Note
  // [Asynchronous random numbers] in core/Generator.h).
  task.generatorIndex = traits.generatorIndex;
  if (task.generatorIndex >= 0) {
    task.generator = deviceGenerator(op, args[task.generatorIndex], device);
    task.args[task.generatorIndex].value = c10::IValue();
  }
  const orStream_t stream = getCurrentOpenRegStream(device.index()).stream();
  std::unique_lock<std::mutex> generatorLock;
  auto* generatorImpl = task.generator.defined() ? task.generator.get<GeneratorImpl>() : nullptr;
  if (generatorImpl != nullptr) {
    generatorLock = std::unique_lock<std::mutex>(task.generator.mutex());
    generatorImpl->waitForPreviousUseOn(stream);
  }
  OPENREG_CHECK(openreg::launch(stream, std::move(task)));
  if (generatorImpl != nullptr) generatorImpl->recordUseOn(stream);

  pushResults(schema, stack, args, fresh);
  return true;
}

// [marker: engine-sync]
void runSync(const c10::OperatorHandle& op, OpTraits& traits, torch::jit::Stack* stack,
             c10::Device device) {
  const auto& schema = op.schema();
  const size_t nArgs = schema.arguments().size();
  const std::vector<c10::IValue> args(stack->end() - nArgs, stack->end());
  refuseQuantizedArguments(op, args, device);  // Note [No quantized tensors]
  OPENREG_CHECK(orStreamSynchronize(getCurrentOpenRegStream(device.index()).stream()));
  // [marker: engine-sync-poison]
  // The kernel reads device memory on this thread: memory a failed task left behind raises its
  // failure here, as a task reading it would (Note [Poisoned memory] in runtime/src/Poison.h).
  AccessList accesses;
  for (size_t i = 0; i < nArgs; ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    const bool write = argument.alias_info() != nullptr && argument.alias_info()->isWrite();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (t.defined() && isOpenReg(t))
        accesses.push_back(memoryAccess(t, !argument.is_out(), write));
    });
  }
  OPENREG_CHECK(checkHostAccesses(accesses));

  torch::jit::Stack s;
  s.reserve(nArgs);
  // The aliases made, with the device tensors they alias (Note [Regrown outputs]).
  struct Made {
    at::Tensor alias;
    KernelAliasSpec spec;
    at::Tensor target;
  };
  std::vector<Made> aliases;
  for (const c10::IValue& arg : args) {
    s.push_back(mapTensors(arg, [&](const at::Tensor& t) {
      aliases.push_back({at::Tensor(), describeKernelAlias(t), t});
      aliases.back().alias = makeKernelAlias(aliases.back().spec);
      return aliases.back().alias;
    }));
  }

  // Random operators: the device generator's state, after its queued uses, through a CPU
  // generator (Note [Asynchronous random numbers] in core/Generator.h).
  const int generatorIndex = traits.generatorIndex;
  if (generatorIndex >= 0) {
    at::Generator generator = deviceGenerator(op, args[generatorIndex], device);
    std::lock_guard<std::mutex> lock(generator.mutex());
    auto* impl = generator.get<GeneratorImpl>();
    impl->waitForUses();
    impl->runWithCpuGenerator([&](const at::Generator& cpu) {
      s[generatorIndex] = cpu;
      runCpuKernelNamingDevice(op, &s, device);
    });
  } else {
    runCpuKernelNamingDevice(op, &s, device);
  }
  for (const Made& made : aliases) {
    // An out= argument the CPU kernel resized where no Meta kernel could say so ahead (this path
    // runs without one): the device tensor takes the new shape, then the values.
    if (made.alias.sizes() != made.target.sizes()) {
      made.target.resize_(made.alias.sizes());
      kernelAlias(made.target).copy_(made.alias);
    } else {
      keepKernelChanges(op, made.alias, made.spec);
    }
  }

  // [marker: engine-shapes-from-cpu]
  // Note [Shapes from the CPU kernel]
  // An operator whose Meta kernel disagrees with its CPU kernel on output shapes
  // (OpTraits::shapesFromCpu) comes here the first time per call signature, and the CPU kernel's
  // result shapes become the signature's answer: later calls with the signature take the
  // asynchronous path. This holds only for operators whose result shapes follow from the
  // arguments' metadata, never their values, which is what the list in OpTraits.cpp promises.
  if (traits.shapesFromCpu) {
    Signature signature;
    if (signature.build(args)) {
      auto answer = std::make_shared<MetaAnswer>();
      recordResults(schema, s, answer.get());
      traits.shapes.insert(std::move(signature), std::move(answer));
    }
  }

  // New tensor results live in host memory: copy them to the device.
  std::vector<c10::IValue> fresh;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const auto* alias = schema.returns()[i].alias_info();
    if (alias != nullptr && alias->isWrite()) continue;
    const c10::IValue& r = s.at(i);
    // An undefined result (a workspace the kernel did not compute) stays undefined.
    auto toDevice = [&](const at::Tensor& t) { return t.defined() ? t.to(device) : t; };
    if (r.isTensor()) {
      fresh.emplace_back(toDevice(r.toTensor()));
    } else if (r.isTensorList()) {
      c10::List<at::Tensor> list;
      for (const at::Tensor& t : r.toTensorList()) list.push_back(toDevice(t));
      fresh.emplace_back(list);
    } else {
      fresh.push_back(r);
    }
  }
  pushResults(schema, stack, args, fresh);
}

// [marker: engine-fallback]
void genericKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpTraits& traits = traitsFor(op);
  if (!traits.indexLists.empty()) moveCpuIndices(traits, stack, op.schema().arguments().size());
  const auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const c10::Device device = findDevice(op, args);
  TORCH_CHECK_NOT_IMPLEMENTED(
      traits.cpuKernel, "openreg: ", op.schema().operator_name(),
      " has no CPU kernel for the engine to run (ATen implements it only for other devices). It "
      "needs a native openreg kernel: please report it. Meanwhile, run this step on the CPU.");
  // [marker: engine-cpu-generator]
  // A kernel that draws from the CPU's default generator (no Generator argument) would give
  // numbers from the wrong generator, on a worker, racing the host. Allowed only when it draws
  // nothing: a dropout_p argument of 0 (attention without dropout).
  if (traits.cpuGeneratorOnly) {
    const auto& arguments = op.schema().arguments();
    bool drawsNothing = false;
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].name() == "dropout_p" && args[i].isDouble())
        drawsNothing = args[i].toDouble() == 0.0;
    }
    TORCH_CHECK_NOT_IMPLEMENTED(drawsNothing, "openreg: ", op.schema().operator_name(),
                                " draws from the CPU's default generator, not openreg's; it needs "
                                "an openreg kernel (see Note [Dropout] in csrc/aten/Dropout.cpp)");
  }
  if (traits.view) {
    copyingFallback(op, stack, "a view operator without an openreg kernel");
    return;
  }
  DeviceScope scope(device.index());
  if (!traits.hostResult && !traits.callingThread && traits.metaWorks != 0 &&
      runAsync(op, traits, stack, device)) {
    count(Path::Async);
    return;
  }
  runSync(op, traits, stack, device);
  count(Path::Sync);
}

}  // namespace

void runOnEngine(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  genericKernel(op, stack);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&genericKernel>());
}

// [marker: engine-explicit-registrations]
// Operators with a fused CPU kernel and also a CompositeExplicitAutograd kernel, which PyTorch
// uses as the "default backend kernel" for PrivateUse1 instead of the fallback: a decomposition
// whose rounding differs from the CPU kernel's. Registering the engine for them runs the CPU
// kernel itself, so results stay bitwise equal to the CPU. The list is every aten operator in
// torch 2.13.0 with a CPU kernel and a CompositeExplicitAutograd kernel (tests/test_engine.py
// re-derives it from the dispatcher and checks it). Three more have a CPU kernel and a
// CompositeImplicitAutograd one, which would shadow the CPU kernel in the same way.
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* name :
       {"native_group_norm", "addr", "addr.out", "_stack", "_stack.out", "any.dims", "any.dims_out",
        "all.dims", "all.dims_out", "linalg__powsum",
        // CPU kernels that a CompositeImplicitAutograd decomposition would shadow in the same way
        "mish_backward", "silu_backward", "native_channel_shuffle"}) {
    m.impl(name, torch::CppFunction::makeFromBoxedFunction<&genericKernel>());
  }
}

}  // namespace openreg::engine
