// What a CPU kernel did to its outputs' aliases that the device tensors must take back: flipped
// view bits, outputs regrown into host memory or restrided, functional results of another shape.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include "aten/KernelAlias.h"

namespace openreg::engine {

// True when the kernel left the alias on the device memory `spec` describes, in its layout.
bool keptLayout(const at::Tensor& alias, const KernelAliasSpec& spec);

// Brings what the kernel did to `alias` back into the device memory `spec` describes: view bits
// (Note [View bits] below), regrown or restrided outputs (Note [Regrown outputs]).
void keepKernelChanges(const c10::OperatorHandle& op, const at::Tensor& alias,
                       const KernelAliasSpec& spec);

// A functional kernel's result into its output (see the definition).
void copyResult(const at::Tensor& result, const at::Tensor& output);

}  // namespace openreg::engine
