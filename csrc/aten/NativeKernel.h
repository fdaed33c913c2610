// How a native kernel runs ATen's CPU code on device memory: one task on the current stream.
//
// A native kernel names its operator and the device tensors the task reads and writes:
//
//   launchOnCurrentStream(out.device(), "aten::convolution", {input, weight, bias}, {out},
//                         [out = kernelAlias(out), ...]() mutable { ... });
//
// The task then fails as the CPU kernel would (Note [Task failures in Python] in
// core/Exception.h), does not run when it would read memory a failed task left behind, and
// poisons what it writes if it fails (Note [Poisoned memory] in runtime/src/Poison.h). It runs
// below autograd (Note [Tasks run below autograd]).
#pragma once

#include <ATen/core/LegacyTypeDispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/record_function.h>
#include <c10/core/Device.h>
#include <c10/util/SmallVector.h>
#include <openreg/task.hpp>

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "aten/KernelAlias.h"
#include "core/Exception.h"
#include "core/FaultInjection.h"
#include "core/OpenRegStream.h"

namespace openreg {

// [marker: tasks-run-below-autograd]
// Note [Tasks run below autograd]
// Kernel aliases are made on the host, often inside torch.inference_mode() (an inference server,
// SentenceTransformer.encode), which makes them inference tensors; the worker that writes them
// runs outside it, and PyTorch's autograd layer refuses an in-place update of an inference tensor
// outside inference mode. A task's tensors are never seen by autograd, so every task runs its
// kernel with the autograd and ADInplaceOrView keys excluded (AutoDispatchBelowADInplaceOrView):
// in-place writes to aliases of either kind reach the CPU kernel, and nothing is recorded.
// Not InferenceMode itself: it also turns grad mode off, and kernels that consult grad mode
// (oneDNN's RNN layers choose their training or inference algorithm by it) would then compute
// differently from the CPU call they mirror.
// Nor is anything recorded by a profiler on the thread (UnrecordedOnThisThread): the ATen calls a
// CPU kernel makes inside a task are the device's work, which torch.profiler sees as the task
// itself (Note [Device activity in torch.profiler]), not operators of the program; a task that a
// host thread runs (Note [A waiting host runs the queued tasks] in runtime/src/Stream.cpp) would
// otherwise add them to that thread's profile. A worker has no callbacks of its own, and toggling
// recording costs thousands of instructions: the guard is taken only when the thread has some.
class UnrecordedOnThisThread {
 public:
  UnrecordedOnThisThread() {
    if (C10_UNLIKELY(at::hasThreadLocalCallbacks())) guard_.emplace();
  }

 private:
  std::optional<at::DisableRecordFunctionGuard> guard_;
};
template <class F>
void runKernel(std::string_view op, F& kernel,
               const std::shared_ptr<const std::string>& injected = nullptr) {
  try {
    if (C10_UNLIKELY(injected != nullptr)) FaultInjection::failIfInjected(injected);
    at::AutoDispatchBelowADInplaceOrView guard;
    const UnrecordedOnThisThread unrecorded;
    kernel();
  } catch (...) {
    rethrowAsTaskError(op);
  }
}

// A native kernel's task: the kernel, its operator's name and the memory it touches.
template <class F>
struct KernelTask {
  const char* op;
  F kernel;
  c10::SmallVector<MemoryAccess, 6> uses;
  std::shared_ptr<const std::string> injected;  // Note [Fault injection] in core/FaultInjection.h

  void operator()() { runKernel(op, kernel, injected); }
  void accesses(AccessList& out) const { out.insert(out.end(), uses.begin(), uses.end()); }
};

// Undefined tensors in `reads` and `writes` (absent optional arguments) are skipped.
template <class F>
KernelTask<std::decay_t<F>> kernelTask(const char* op, c10::ArrayRef<at::Tensor> reads,
                                       c10::ArrayRef<at::Tensor> writes, F&& kernel) {
  KernelTask<std::decay_t<F>> task{op, std::forward<F>(kernel), {}, nullptr};
  for (const at::Tensor& t : reads) task.uses.push_back(memoryAccess(t, true, false));
  for (const at::Tensor& t : writes) task.uses.push_back(memoryAccess(t, false, true));
  return task;
}

// Queues the kernel on the current stream of `device`. The kernel captures kernel aliases
// (KernelAlias.h), never the caller's tensors: Note [Tasks hold no Python-visible tensor].
// [marker: launch-native-kernel]
template <class F>
void launchOnCurrentStream(c10::Device device, const char* op, c10::ArrayRef<at::Tensor> reads,
                           c10::ArrayRef<at::Tensor> writes, F&& kernel) {
  auto task = kernelTask(op, reads, writes, std::forward<F>(kernel));
  if (FaultInjection::armed()) task.injected = FaultInjection::kernelLaunch(device.index());
  OPENREG_CHECK(openreg::launch(getCurrentOpenRegStream(device.index()).stream(), std::move(task)));
}

}  // namespace openreg
