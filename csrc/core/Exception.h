// Turning runtime error codes into PyTorch errors.
//
// OPENREG_CHECK(expr) evaluates a runtime call and, on failure, throws the c10 error that reaches
// Python as the matching exception: torch.OutOfMemoryError for orErrorMemoryAllocation,
// RuntimeError otherwise. The message carries the runtime's own detail (orGetLastErrorMessage:
// device, sizes, what to do) and where the call was made. One out-of-line function does the work,
// so the check costs a compare and a branch at each call site.
//
// OPENREG_WARN(expr) is the variant for noexcept paths (destructors, destroyEvent,
// uncheckedSetDevice): it logs a warning instead of throwing.
#pragma once

#include <c10/macros/Macros.h>
#include <openreg/runtime.h>

#include "core/Macros.h"

namespace openreg::detail {
[[noreturn]] OPENREG_TORCH_API void checkFailed(orError_t error, const char* expr, const char* func,
                                                const char* file, int line);
OPENREG_TORCH_API void warnFailed(orError_t error, const char* expr, const char* func,
                                  const char* file, int line) noexcept;
}  // namespace openreg::detail

#define OPENREG_CHECK(EXPR)                                                                     \
  do {                                                                                          \
    const orError_t openreg_check_error = (EXPR);                                               \
    if (C10_UNLIKELY(openreg_check_error != orSuccess)) {                                       \
      ::openreg::detail::checkFailed(openreg_check_error, #EXPR, __func__, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)

#define OPENREG_WARN(EXPR)                                                                    \
  do {                                                                                        \
    const orError_t openreg_warn_error = (EXPR);                                              \
    if (C10_UNLIKELY(openreg_warn_error != orSuccess)) {                                      \
      ::openreg::detail::warnFailed(openreg_warn_error, #EXPR, __func__, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)
