// How a native kernel is registered: m.impl("op", OPENREG_NATIVE(kernel)) in a
// TORCH_LIBRARY_IMPL(..., PrivateUse1, m) block. The wrapper counts the call in the ledger and
// marks the thread as serving it while the kernel runs, so the operators the kernel calls itself
// (its output allocations, resizes and copies) are not counted again (Note [Counting native calls]
// in aten/engine/Ledger.h). Every kernel that serves its operator call itself is registered so;
// one that hands the call to the engine or composes other operators is registered with TORCH_FN.
#pragma once

#include <torch/library.h>

#include <utility>

#include "aten/engine/Ledger.h"

namespace openreg {

template <class Signature, Signature* fn>
struct NativeCall;

// [marker: native-registration]
template <class R, class... Args, R (*fn)(Args...)>
struct NativeCall<R(Args...), fn> {
  static R call(Args... args) {
    engine::count(engine::Path::Native);
    engine::ServedCall serving;
    return fn(std::forward<Args>(args)...);
  }
};

}  // namespace openreg

#define OPENREG_NATIVE(fn) TORCH_FN((::openreg::NativeCall<decltype(fn), fn>::call))
