// Warnings of a kernel run whose result may not be the one that counts: held back, or dropped.
#pragma once

#include <c10/util/Exception.h>

#include <string>
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
  // Forgets ATen's warning about resizing an out tensor that had elements. An .out kernel run on
  // outputs the engine made for a functional call warns so when its meta function announces
  // another shape than the one it ends with (isin of a Scalar: [0], then []): the caller passed
  // no out tensor, so that warning is never the caller's.
  void dropResizedOutputWarnings() {
    std::erase_if(warnings, [](const c10::Warning& warning) {
      return warning.msg().find("An output with one or more elements was resized") !=
             std::string::npos;
    });
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
