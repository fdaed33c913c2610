// The pieces every error message is written with, so that each is written one way: the prefix
// naming the API call (Note [Error messages] in Runtime.h) and the form of an address.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace openreg {

// "openreg: <call>: <what>": the one way a message names the API call that failed.
std::string callMessage(const char* call, std::string_view what);

// An address as messages print it: "0x" and lowercase hex digits.
std::string hexAddress(std::uintptr_t address);
inline std::string hexAddress(const void* address) {
  return hexAddress(reinterpret_cast<std::uintptr_t>(address));
}

}  // namespace openreg
