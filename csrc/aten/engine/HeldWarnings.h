// Warnings held back until a kernel's result is known to be the one that counts.
#pragma once

#include <c10/util/Exception.h>

#include <vector>

namespace openreg::engine {

// Collects the warnings raised on this thread while it is installed (with
// c10::WarningUtils::WarningHandlerGuard); release() passes them on, so a kernel whose result is
// thrown away (Note [Unfaithful out kernels]) does not warn about what the caller never did.
struct HeldWarnings : c10::WarningHandler {
  std::vector<c10::Warning> warnings;
  void process(const c10::Warning& warning) override { warnings.push_back(warning); }
  void release() {
    for (const c10::Warning& warning : warnings) c10::warn(warning);
    warnings.clear();
  }
};

}  // namespace openreg::engine
