// The classic copying fallback: inputs copied to the CPU, the CPU kernel run there, results copied
// back (at::native::cpu_fallback). Synchronous and slow; kept as the reference mechanism, for view
// operators without an openreg kernel, and for operators routed to it one by one.
//
// Note [Per-operator copying fallback]
// routeToCopyingFallback(name) registers the copying kernel for one operator with
// TORCH_LIBRARY_IMPL's runtime form (a torch::Library fragment for aten on PrivateUse1), so that
// operator stops reaching the engine; restoreFromCopyingFallback(name) drops the registration.
// OPENREG_COPYING_OPS=aten::foo,aten::bar.out routes operators when torch_openreg loads
// (torch_openreg/openreg/ledger.py): a device declaring operators it does not run, or a user
// bisecting a wrong result between the engine and the classic path; torch.openreg.
// copying_fallback(...) does the same for a block of code. Every call is
// counted as `copying` in the ledger and is subject to the fallback policy.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <string>
#include <vector>

#include "core/Macros.h"

namespace openreg::engine {

void copyingFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* why);

// `name` is "aten::add.Tensor" or "add.Tensor" (overload optional). Throws for an unknown operator.
OPENREG_TORCH_API void routeToCopyingFallback(const std::string& name);
OPENREG_TORCH_API void restoreFromCopyingFallback(const std::string& name);
OPENREG_TORCH_API std::vector<std::string> operatorsOnCopyingFallback();

}  // namespace openreg::engine
