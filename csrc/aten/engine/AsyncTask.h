// The task the engine's asynchronous path queues: an operator's CPU kernel on kernel-window
// aliases of its arguments (Note [Generic engine] in Engine.cpp).
//
// Note [Unfaithful out kernels]
// With an .out overload, the kernel writes straight into the outputs' device memory. Some CPU .out
// kernels assume more of their out tensors than the Meta shapes give them: binary_cross_entropy.out
// computes elementwise into its out, then reduces into it, and gets a wrong value from an out of
// the reduced shape; native_layer_norm.out refuses the float statistics the Meta kernel announces
// for half inputs. Such a kernel moves an output alias to host memory (Note [Regrown outputs] in
// OutputRepair.cpp) or throws; the task then runs the functional kernel instead, copies its
// results, and the operator takes that route from then on.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>
#include <c10/util/SmallVector.h>
#include <openreg/task.hpp>

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// An argument as the task carries it: a device tensor as the description of its kernel alias
// (made into a tensor on the worker: the host allocates no tensor for it), anything else as
// taskArgument() makes it (Arguments.h).
struct TaskArgument {
  c10::IValue value;
  std::optional<KernelAliasSpec> alias;
};

// [marker: engine-call-state]
// Note [Global state is the call's]
// A CPU kernel reads some process state when it runs: deterministic mode (which algorithm,
// whether to alert, whether to fill fresh memory with NaN) and the thread's grad mode. On a GPU
// the host decides at the launch; here the kernel runs later, on a worker, and read the state of
// that moment: switched off right after an index_copy with duplicate indices, the call took the
// nondeterministic path. So the state is captured at the call (CallState::capture, a few loads)
// and the task runs with it:
//  - grad mode is the worker thread's own: set for the task (c10::AutoGradMode);
//  - deterministic mode is process-wide, with no per-thread override in ATen. A call made with it
//    on waits for its task (runAsync), so the state cannot change under it; a call made with it
//    off whose task runs after the host turned it on sets it off for the kernel and back after
//    (DeterministicScope), unless the host changed it again meanwhile. The host reads the mode
//    through CallState::capture, which gives the host's setting while a task runs with another
//    (the call's signature, its checks and its task all take it from there): a host that turned
//    the mode on read it off in that window, and its put_ skipped the refusal at the call that its
//    task then raised (PyTorch's test_torch, run beside other work). ATen's own reads of the flag
//    on the host (a native kernel's) still see the task's setting in that window.
// The default dtype is not needed: the Meta answer fixed every output's dtype at the call, and
// the shape cache keys on it (Note [Shape cache]). Python's warnings filters are not either: a
// warning a kernel raises in a task is held and given to Python on the host at its next meeting
// with the device (Note [Task warnings] in core/TaskWarnings.h), under the filters in force then.
struct CallState {
  bool deterministic = false;
  bool deterministicWarnOnly = false;
  bool fillUninitialized = true;
  bool gradMode = true;

  static CallState capture();
  // Returns once no task runs with its call's mode in place of the host's: then ATen's own reads
  // of the mode on the host see the host's (a task's kernel takes microseconds).
  static void waitForHostMode();
};

// [marker: engine-task]
struct AsyncTask {
  AsyncTask(c10::OperatorHandle op, OpTraits* traits) : op(std::move(op)), traits(traits) {}

  c10::OperatorHandle op;
  std::optional<c10::OperatorHandle> outOp;  // the .out overload to run, when faithful
  OpTraits* traits;
  // Inline storage for the common sizes: the host builds a task on every call, and a heap
  // allocation per vector showed in its profile.
  c10::SmallVector<TaskArgument, 6> args;
  c10::SmallVector<KernelAliasSpec, 2> outputs;  // the new outputs
  c10::SmallVector<std::pair<size_t, size_t>, 2>
      slots;                // per output: its return index, list position
  at::Generator generator;  // random operators: the device generator
  int generatorIndex = -1;
  std::shared_ptr<const std::string> injected;  // Note [Fault injection] in core/FaultInjection.h
  CallState state;                              // Note [Global state is the call's]

  void operator()();
  // What the task reads and writes (Note [Poisoned memory] in runtime/src/Poison.h).
  void accesses(AccessList& out) const;
  // The operator, for descriptions of captured graphs (docs/graphs.md).
  const char* name() const { return op.schema().name().c_str(); }

 private:
  using Aliases = c10::SmallVector<std::pair<at::Tensor, const KernelAliasSpec*>, 8>;
  torch::jit::Stack kernelInputs(const Aliases& aliases) const;
  void run(torch::jit::Stack s, Aliases& aliases);
  void runFunctional(torch::jit::Stack s, Aliases& aliases);
};

// A task that lives on the heap and is queued as one pointer (it fits the runtime's inline task
// storage, so the queue moves 8 bytes instead of the task).
template <class T>
struct HeapTask {
  std::unique_ptr<T> task;
  void operator()() { (*task)(); }
  void accesses(AccessList& out) const { task->accesses(out); }
  const char* name() const { return task->name(); }
};

}  // namespace openreg::engine
