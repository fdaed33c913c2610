#include "core/Exception.h"

#include <c10/util/Exception.h>

#include <string>

namespace openreg::detail {
namespace {
std::string describe(orError_t error, const char* expr, const char* func) {
  std::string message = orGetLastErrorMessage();
  if (message.empty()) message = std::string("openreg: ") + orGetErrorString(error);
  return message + " [" + orGetErrorName(error) + " from " + expr + " in " + func + "]";
}
}  // namespace

void checkFailed(orError_t error, const char* expr, const char* func, const char* file, int line) {
  const c10::SourceLocation where{func, file, static_cast<uint32_t>(line)};
  if (error == orErrorMemoryAllocation) {
    throw c10::OutOfMemoryError(where, describe(error, expr, func));
  }
  throw c10::Error(where, describe(error, expr, func));
}

void warnFailed(orError_t error, const char* expr, const char* func, const char*, int) noexcept {
  try {
    TORCH_WARN(describe(error, expr, func));
  } catch (...) {
    // A warning handler that throws (warnings turned into errors) must not escape a noexcept path.
  }
}

}  // namespace openreg::detail
