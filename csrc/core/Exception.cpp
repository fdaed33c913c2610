#include "core/Exception.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <exception>
#include <string>

namespace openreg {
namespace {

// The categories a task failure carries: which c10 exception type the CPU kernel threw.
enum class TaskErrorKind : int {
  Runtime = 0,
  Index,
  Value,
  Type,
  NotImplemented,
  LinAlg,
  OutOfMemory,
};

TaskErrorKind kindOf(const c10::Error& e) {
  if (dynamic_cast<const c10::IndexError*>(&e)) return TaskErrorKind::Index;
  if (dynamic_cast<const c10::ValueError*>(&e)) return TaskErrorKind::Value;
  if (dynamic_cast<const c10::TypeError*>(&e)) return TaskErrorKind::Type;
  if (dynamic_cast<const c10::NotImplementedError*>(&e)) return TaskErrorKind::NotImplemented;
  if (dynamic_cast<const c10::LinAlgError*>(&e)) return TaskErrorKind::LinAlg;
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e)) return TaskErrorKind::OutOfMemory;
  return TaskErrorKind::Runtime;
}

// Throws the c10 error of `kind`: the Python exception type the CPU raises.
[[noreturn]] void throwOfKind(TaskErrorKind kind, const c10::SourceLocation& where,
                              std::string message) {
  switch (kind) {
    case TaskErrorKind::Index:
      throw c10::IndexError(where, std::move(message));
    case TaskErrorKind::Value:
      throw c10::ValueError(where, std::move(message));
    case TaskErrorKind::Type:
      throw c10::TypeError(where, std::move(message));
    case TaskErrorKind::NotImplemented:
      throw c10::NotImplementedError(where, std::move(message));
    case TaskErrorKind::LinAlg:
      throw c10::LinAlgError(where, std::move(message));
    case TaskErrorKind::OutOfMemory:
      throw c10::OutOfMemoryError(where, std::move(message));
    case TaskErrorKind::Runtime:
      break;
  }
  throw c10::Error(where, std::move(message));
}

}  // namespace

// [marker: rethrow-as-task-error]
void rethrowAsTaskError(std::string_view op) {
  const std::string prefix = std::string(op) + ": ";
  try {
    throw;
  } catch (const TaskError&) {
    throw;  // already one (a nested task helper)
  } catch (const c10::Error& e) {
    throw TaskError(static_cast<int>(kindOf(e)), prefix + e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    throw TaskError(static_cast<int>(TaskErrorKind::OutOfMemory),
                    prefix + "the host is out of memory");
  } catch (const std::exception& e) {
    throw TaskError(static_cast<int>(TaskErrorKind::Runtime), prefix + e.what());
  } catch (...) {
    throw TaskError(static_cast<int>(TaskErrorKind::Runtime),
                    prefix + "the kernel threw a non-standard exception");
  }
}

void rethrowNamingDevice(c10::Device device, std::string_view op) {
  try {
    throw;
  } catch (const c10::Error& e) {
    throwOfKind(kindOf(e), {__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                std::string(e.what_without_backtrace()) + " (openreg: " + std::string(op) + " on " +
                    device.str() + ")");
  }
}

namespace detail {
namespace {
std::string describe(orError_t error, const char* expr, const char* func) {
  std::string message = orGetLastErrorMessage();
  if (message.empty()) message = std::string(OR_DEVICE_NAME ": ") + orGetErrorString(error);
  // A task's failure is the kernel's own message, already naming the device and the operator.
  if (error == orErrorLaunchFailure) return message;
  return message + " [" + orGetErrorName(error) + " from " + expr + " in " + func + "]";
}
}  // namespace

void checkFailed(orError_t error, const char* expr, const char* func, const char* file, int line) {
  const c10::SourceLocation where{func, file, static_cast<uint32_t>(line)};
  std::string message = describe(error, expr, func);
  if (error == orErrorMemoryAllocation) throw c10::OutOfMemoryError(where, std::move(message));
  if (error == orErrorLaunchFailure) {
    throwOfKind(static_cast<TaskErrorKind>(lastErrorCategory()), where, std::move(message));
  }
  throw c10::Error(where, std::move(message));
}

void warnFailed(orError_t error, const char* expr, const char* func, const char*, int) noexcept {
  try {
    TORCH_WARN(describe(error, expr, func));
  } catch (...) {
    // A warning handler that throws (warnings turned into errors) must not escape a noexcept path.
  }
}

}  // namespace detail
}  // namespace openreg
