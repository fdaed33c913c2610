// Kernels that Inductor compiled for openreg graphs, launched as stream tasks.
//
// Note [Compiled kernel launch]
// Inductor's C++ backend compiles each fused kernel of an openreg graph into a shared object, as it
// does for the CPU. The generated code is plain C++ that dereferences the pointers it is given, so
// it must only ever see kernel-window addresses, and only on a worker. Beside each kernel, the
// wrapper emits a typed trampoline (torch_openreg/_compile/kernel.py#kernel-trampoline):
//   extern "C" void openreg_trampoline(const uint64_t* args)
// which unpacks one 64-bit slot per argument into the kernel's own parameter types (a pointer, an
// integer, or a double's bits for a floating-point scalar, which the x86-64 ABI passes in other
// registers than integers; so no "everything is an integer" call can be right).
//
// A call of the compiled graph calls CompiledKernel for each kernel. On the host it only
//   - checks the arguments (tensors on one openreg device; a CPU tensor only as a 0-dim scalar),
//   - translates each device tensor's data pointer to its kernel-window alias (orGetKernelPointer
//     through describeKernelAlias: the host never dereferences it),
//   - clones each 0-dim CPU tensor, which the task keeps alive (Note [Tasks hold no Python-visible
//     tensor]),
//   - and launches one ordinary runtime task on the device's current stream, read when the call
//     runs: so a compiled call is as asynchronous as eager operators and obeys
//     torch.openreg.stream(...), events and record_stream, and whatever sees stream tasks (graph
//     capture, the profiler) sees a compiled kernel like any other.
// The task declares what it reads and writes (Note [Poisoned memory]): a kernel that throws (an
// index out of bounds: Inductor's TORCH_CHECK) poisons its outputs and fails with a message
// naming the graph and the kernel; a kernel that reads poisoned memory does not run.
// Buffers the graph frees right after a launch are safe: the caching allocator orders their reuse
// by stream, as for eager operators (Note [Caching allocator]).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/Macros.h"

namespace openreg::inductor {

// How the trampoline reads one argument slot; from the kernel's C++ signature.
enum class ArgKind : int {
  Input = 0,        // const T*: read
  InputOutput = 1,  // T* in_out_ptrN: read and written
  Output = 2,       // T*: written
  Integer = 3,      // an integral scalar (sizes, seeds)
  Floating = 4,     // float or double scalar: the slot holds a double's bits
};

// One argument of a call, as the binding converts it from Python.
using KernelArgument = std::variant<at::Tensor, int64_t, double>;

// [marker: compiled-kernel]
class OPENREG_TORCH_API CompiledKernel {
 public:
  // Finds `symbol` (the trampoline) in the already loaded shared object at `library`. `name` and
  // `graph` name the kernel in errors. Throws if the library is not loaded or lacks the symbol.
  CompiledKernel(const std::string& library, const std::string& symbol, std::vector<ArgKind> kinds,
                 std::string name, std::string graph);

  // Launches the kernel on the current stream of its tensors' device and returns at once.
  void launch(const std::vector<KernelArgument>& args) const;

  const std::string& name() const { return info_->name; }
  const std::string& graph() const { return info_->graph; }

  struct Info {
    void (*entry)(const uint64_t*) = nullptr;
    std::vector<ArgKind> kinds;
    std::string name;
    std::string graph;
    std::string label;  // "compiled kernel <name> of graph <graph>": the task's operator name
  };

 private:
  // Shared with the tasks in flight, which name the kernel when they fail.
  std::shared_ptr<const Info> info_;
};

}  // namespace openreg::inductor
