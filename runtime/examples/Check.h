// OR_CHECK for example and benchmark programs: on failure, print the call, the error's name and
// the runtime's message, and exit. (Libraries return or throw instead; see csrc/ later.)
#pragma once

#include <openreg/runtime.h>

#include <cstdio>
#include <cstdlib>

#define OR_CHECK(call)                                                                     \
  do {                                                                                     \
    const orError_t or_check_error = (call);                                               \
    if (or_check_error != orSuccess) {                                                     \
      std::fprintf(stderr, "%s failed: %s\n  %s\n", #call, orGetErrorName(or_check_error), \
                   orGetLastErrorMessage());                                               \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)
