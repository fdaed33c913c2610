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
//
// Note [Task failures in Python]
// A kernel that fails on a worker fails as it would on the CPU: a task catches what the CPU kernel
// threw and rethrows it as an openreg::TaskError (rethrowAsTaskError) whose message is the CPU's
// own (without the C++ backtrace), prefixed with the operator, and whose category records the
// exception type. When that failure reaches the host (a synchronization, a read of memory it
// poisoned), OPENREG_CHECK throws the same c10 type, so Python sees IndexError for an index out of
// range, ValueError, TypeError, NotImplementedError, LinAlgError or OutOfMemoryError as the CPU
// would raise, with the device and the operator in the message. See docs/errors.md.
#pragma once

#include <c10/core/Device.h>
#include <c10/macros/Macros.h>
#include <openreg/runtime.h>

#include <string_view>

#include "core/Macros.h"

namespace openreg::detail {
[[noreturn]] OPENREG_TORCH_API void checkFailed(orError_t error, const char* expr, const char* func,
                                                const char* file, int line);
OPENREG_TORCH_API void warnFailed(orError_t error, const char* expr, const char* func,
                                  const char* file, int line) noexcept;
}  // namespace openreg::detail

namespace openreg {
// Inside a task's catch block: rethrows the exception in flight as an openreg::TaskError naming
// `op` (Note [Task failures in Python]).
[[noreturn]] OPENREG_TORCH_API void rethrowAsTaskError(std::string_view op);
// Inside a catch block on the host: rethrows the c10 error in flight as the same type, the device
// and the operator after its message, "<the CPU's words> (openreg: aten::op on openreg:0)": code
// matches the CPU's words from their start (PyTorch's tests do, with `^`). Other exceptions pass
// unchanged.
[[noreturn]] OPENREG_TORCH_API void rethrowNamingDevice(c10::Device device, std::string_view op);
}  // namespace openreg

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
