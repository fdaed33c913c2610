// The pieces of error messages (Messages.h).
#include "Messages.h"

#include <cstdio>

#include <openreg/runtime.h>

namespace openreg {

std::string callMessage(const char* call, std::string_view what) {
  std::string message = OR_DEVICE_NAME ": ";
  message.append(call).append(": ").append(what);
  return message;
}

std::string hexAddress(std::uintptr_t address) {
  char buf[2 + 16 + 1];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(address));
  return buf;
}

}  // namespace openreg
