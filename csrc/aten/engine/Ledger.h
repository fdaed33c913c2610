// The ledger of execution paths, and the fallback policy.
//
// Every operator call on openreg tensors takes one path, counted here:
//   native   a kernel registered for openreg (copies, fills, factories): Note [Counting native
//            calls]
//   async    the generic engine's asynchronous path: ATen's CPU kernel run as a stream task on
//            kernel-window aliases, outputs allocated ahead from Meta shapes; random operators
//            too (Note [Asynchronous random numbers] in core/Generator.h)
//   sync     the generic engine's synchronizing path: the stream is synchronized first (data-
//            dependent shapes, host results, other namespaces), then the same CPU kernel runs
//   copying  the classic fallback: inputs copied to the CPU and results back (also counted in
//            copiedBytes)
//   compiled a kernel Inductor compiled for an openreg graph, launched as a stream task
//            (Note [Compiled kernel launch] in inductor/CompiledKernel.h); the graph's extern
//            kernels are operator calls and take the paths above
// Also counted: Meta kernel runs, which the asynchronous path needs only for call signatures it has
// not seen (Note [Shape cache]); CPU kernels run on the host to check a call (Note [Call checks]),
// which a signature needs once at most (Note [Call checks are remembered]); and the host's waits
// for a device (synchronizations: every synchronizing runtime call, wherever it comes from). A
// steady training step counts none of these three (tests/test_speed_guard.py).
// The policy (OPENREG_FALLBACK=allow|warn|error, or a scoped override) decides what a copying
// fallback does, so a test can make a silent one impossible.
#pragma once

#include <cstdint>
#include <string>

#include "core/Macros.h"

namespace openreg::engine {

enum class Path : int { Native = 0, Async = 1, Sync = 2, Copying = 3, Compiled = 4 };
constexpr int kPathCount = 5;
OPENREG_TORCH_API const char* pathName(Path path);

struct PathCounts {
  int64_t calls[kPathCount] = {};
  int64_t copiedBytes = 0;
  int64_t metaCalls = 0;
  int64_t checkKernels = 0;
  int64_t synchronizations = 0;
};

// Note [Counting native calls]
// A native call is one operator call that a native kernel serves, counted once, when the kernel is
// entered through its registration (OPENREG_NATIVE in aten/Registration.h). What the kernel calls
// while it serves the call (allocating its outputs, resizing, the copy .item() makes to the CPU)
// is part of that call: a ServedCall on the stack marks the thread as serving one, and native
// calls made meanwhile are not counted. The engine's paths count every run wherever it is called
// from: each is a CPU kernel run, a synchronization or a round trip through host memory, which is
// what the ledger is read for. A kernel that only composes other operators (native_dropout, lstm)
// is not native: the operators it calls are counted.
class OPENREG_TORCH_API ServedCall {
 public:
  ServedCall();
  ~ServedCall();
  ServedCall(const ServedCall&) = delete;
  ServedCall& operator=(const ServedCall&) = delete;
};

// Counts one call of `path`; a native one only if this thread is serving no call (ServedCall).
OPENREG_TORCH_API void count(Path path);
OPENREG_TORCH_API void countCopiedBytes(int64_t bytes);
void countMetaCall();
void countCheckKernel();
OPENREG_TORCH_API PathCounts pathCounts();

enum class FallbackPolicy : int { Allow = 0, Warn = 1, Error = 2 };
// The policy in effect on this thread: the scoped override if any, else OPENREG_FALLBACK.
OPENREG_TORCH_API FallbackPolicy fallbackPolicy();
// Sets this thread's override; returns the previous one (-1: none). -1 clears it.
OPENREG_TORCH_API int setThreadFallbackPolicy(int policy);
// Applies the policy to a copying fallback of `op`: throws, warns or does nothing.
void checkCopyingFallback(const std::string& op, const std::string& why);

}  // namespace openreg::engine
