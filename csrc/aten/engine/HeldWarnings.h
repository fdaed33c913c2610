// Warnings of a kernel run whose result may not be the one that counts: held back, or dropped.
#pragma once

#include <c10/util/Exception.h>

#include <vector>

namespace openreg::engine {

// Collects the warnings raised on this thread while it is installed (with
// c10::WarningUtils::WarningHandlerGuard); release() passes them on, so a kernel whose result is
// thrown away (Note [Unfaithful out kernels]) does not warn about what the caller never did.
// [marker: held-warnings]
struct HeldWarnings : c10::WarningHandler {
  std::vector<c10::Warning> warnings;
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  void release() {
    for (const c10::Warning& warning : warnings) c10::warn(warning);
    warnings.clear();
  }
};

// Drops every warning raised on this thread while it lives: a kernel run whose warnings are the
// call's own given elsewhere (a stand-in run of a call check, the CPU kernel run on an empty
// call's stand-ins, a task whose operator gave its warnings at the call).
struct DroppedWarnings : c10::WarningHandler {
  DroppedWarnings() : guard(this) {}
  void process(const c10::Warning&) override {}
  c10::WarningUtils::WarningHandlerGuard guard;
};

}  // namespace openreg::engine
