#include "aten/engine/AsyncTask.h"

#include <ATen/Context.h>
#include <ATen/core/LegacyTypeDispatch.h>
#include <c10/core/GradMode.h>
#include <c10/util/Exception.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "aten/NativeKernel.h"
#include "aten/engine/Arguments.h"
#include "aten/engine/HeldWarnings.h"
#include "aten/engine/OutputRepair.h"
#include "core/Exception.h"
#include "core/FaultInjection.h"
#include "core/Generator.h"
#include "core/TaskWarnings.h"

namespace openreg::engine {
namespace {

// The host's setting while a task runs with its call's (Note [Global state is the call's]): the
// host reads it through CallState::capture, never the task's.
std::mutex gFlipMutex;
std::atomic<int> gFlips{0};
CallState gHostState;  // under gFlipMutex, while gFlips > 0
CallState gTaskState;

bool sameMode(const CallState& a, const CallState& b) {
  return a.deterministic == b.deterministic && a.deterministicWarnOnly == b.deterministicWarnOnly &&
         a.fillUninitialized == b.fillUninitialized;
}

CallState globalMode() {
  const at::Context& ctx = at::globalContext();
  return {ctx.deterministicAlgorithms(), ctx.deterministicAlgorithmsWarnOnly(),
          ctx.deterministicFillUninitializedMemory(), true};
}

// Runs the kernel with the call's deterministic mode (Note [Global state is the call's]): nothing
// to do in the usual case, where it has not changed since the call, and no lock taken for it.
class DeterministicScope {
 public:
  explicit DeterministicScope(const CallState& call) : call_(call) {
    if (gFlips.load(std::memory_order_acquire) == 0 && sameMode(globalMode(), call)) return;
    std::lock_guard<std::mutex> lock(gFlipMutex);
    previous_ = globalMode();
    changed_ = !sameMode(previous_, call);
    if (!changed_) return;
    // Another task's change may be in effect: the host's setting is the one it replaced.
    if (gFlips.load(std::memory_order_relaxed) > 0) previous_ = gHostState;
    gHostState = previous_;
    gTaskState = call;
    gFlips.fetch_add(1, std::memory_order_release);
    set(call);
  }
  ~DeterministicScope() {
    if (!changed_) return;
    std::lock_guard<std::mutex> lock(gFlipMutex);
    // Put back the host's setting, unless the host has set it again meanwhile.
    if (sameMode(globalMode(), call_)) set(previous_);
    gFlips.fetch_sub(1, std::memory_order_release);
  }
  DeterministicScope(const DeterministicScope&) = delete;
  DeterministicScope& operator=(const DeterministicScope&) = delete;

 private:
  static void set(const CallState& state) {
    at::Context& ctx = at::globalContext();
    ctx.setDeterministicAlgorithms(state.deterministic, state.deterministicWarnOnly);
    ctx.setDeterministicFillUninitializedMemory(state.fillUninitialized);
  }

  const CallState& call_;
  CallState previous_;
  bool changed_ = false;
};

}  // namespace

CallState CallState::capture() {
  CallState state;
  if (gFlips.load(std::memory_order_acquire) == 0) {
    state = globalMode();
  } else {
    // A task runs with its call's setting: the host's is the one the task replaced, unless the
    // host has set another meanwhile.
    std::lock_guard<std::mutex> lock(gFlipMutex);
    state = globalMode();
    if (gFlips.load(std::memory_order_relaxed) > 0 && sameMode(state, gTaskState))
      state = gHostState;
  }
  state.gradMode = c10::GradMode::is_enabled();
  return state;
}

void CallState::waitForHostMode() {
  while (gFlips.load(std::memory_order_acquire) > 0) std::this_thread::yield();
}

// [marker: engine-task-run]
void AsyncTask::operator()() {
  // Note [Task warnings]; an operator with a call check gave its warnings at the call (Note
  // [Call checks]), and the kernel's repeats of them are dropped.
  std::optional<TaskWarningSink> warnings;
  std::optional<DroppedWarnings> dropped;
  if (traits->callChecks.warn) {
    dropped.emplace();
  } else {
    warnings.emplace();
  }
  try {
    if (C10_UNLIKELY(injected != nullptr)) FaultInjection::failIfInjected(injected);
    // Note [Tasks run below autograd] in NativeKernel.h
    at::AutoDispatchBelowADInplaceOrView guard;
    const UnrecordedOnThisThread unrecorded;  // Note [Tasks run below autograd]
    // Note [Global state is the call's]
    c10::AutoGradMode gradMode(state.gradMode);
    DeterministicScope deterministic(state);
    Aliases aliases;
    for (TaskArgument& arg : args) {
      if (arg.alias) aliases.emplace_back(makeKernelAlias(*arg.alias), &*arg.alias);
    }
    torch::jit::Stack inputs = kernelInputs(aliases);
    if (generator.defined()) {
      generator.get<GeneratorImpl>()->runWithCpuGenerator([&](const at::Generator& cpu) {
        inputs[generatorIndex] = cpu;
        run(std::move(inputs), aliases);
      });
    } else {
      run(std::move(inputs), aliases);
    }
    for (auto& alias : aliases)
      recycleKernelAlias(std::move(alias.first));  // Note [Recycled kernel aliases]
  } catch (...) {
    rethrowAsTaskError(c10::toString(op.schema().operator_name()));
  }
}

// [marker: engine-task-accesses]
// What the task reads and writes (Note [Poisoned memory] in runtime/src/Poison.h): every device
// tensor argument is read, except out= arguments; written arguments and new outputs are
// written. Asked for only when some memory is poisoned or the task failed.
void AsyncTask::accesses(AccessList& out) const {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    const auto* alias = arguments[i].alias_info();
    const bool write = alias != nullptr && alias->isWrite();
    const bool read = !arguments[i].is_out() && !(i == 0 && traits->overwritesSelf);
    if (args[i].alias) {
      out.push_back(memoryAccess(*args[i].alias, read, write));
    } else if (!args[i].value.isTensor()) {  // lists hold kernel aliases; CPU scalars are clones
      forEachTensor(args[i].value,
                    [&](const at::Tensor& t) { out.push_back(memoryAccess(t, read, write)); });
    }
  }
  for (const KernelAliasSpec& spec : outputs) out.push_back(memoryAccess(spec, false, true));
}

// The kernel's arguments: the task's, each device tensor as its kernel alias (aliases holds them
// in argument order). Values are copied: a replayed graph runs the task again.
torch::jit::Stack AsyncTask::kernelInputs(const Aliases& aliases) const {
  torch::jit::Stack s;
  s.reserve(args.size() + outputs.size());
  size_t k = 0;
  for (const TaskArgument& arg : args) {
    if (arg.alias) {
      s.emplace_back(aliases[k++].first);
    } else {
      s.push_back(arg.value);
    }
  }
  return s;
}

void AsyncTask::run(torch::jit::Stack s, Aliases& aliases) {
  if (outOp) {
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
      held.dropResizedOutputWarnings();
    } catch (const std::exception&) {
      // An .out kernel refusing outputs of the Meta dtypes (native_layer_norm.out for half
      // inputs): the functional kernel decides. A random kernel is not run twice.
      if (generator.defined()) throw;
      traits->outVariantFaithful = false;
      aliases.resize(firstOutput);
      runFunctional(kernelInputs(aliases), aliases);
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
    s = kernelInputs(aliases);
  }
  runFunctional(std::move(s), aliases);
}

void AsyncTask::runFunctional(torch::jit::Stack s, Aliases& aliases) {
  HeldWarnings held;  // as for the .out kernel above: a regrown argument's warning is dropped
  {
    c10::WarningUtils::WarningHandlerGuard guard(&held);
    op.redispatchBoxed(kCpuKeys, &s);
  }
  // A caller's out= tensors were resized at the call, which gave ATen's warning there.
  held.dropResizedOutputWarnings();
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

}  // namespace openreg::engine
