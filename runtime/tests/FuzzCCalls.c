/* The fuzzer's calls with out-of-range enum values, made from C as a C caller makes them: in C an
 * enum is an int, while in C++ loading such a value through the enum type is undefined behaviour
 * (and UBSan says so). */
#include <openreg/runtime.h>

const char* fuzzErrorName(int code) {
  return orGetErrorName((orError_t)code);
}

const char* fuzzErrorString(int code) {
  return orGetErrorString((orError_t)code);
}

orError_t fuzzMemcpyWithKind(void* dst, const void* src, size_t count, int kind) {
  return orMemcpy(dst, src, count, (orMemcpyKind)kind);
}

orError_t fuzzMemcpyAsyncWithKind(void* dst, const void* src, size_t count, int kind,
                                  orStream_t stream) {
  return orMemcpyAsync(dst, src, count, (orMemcpyKind)kind, stream);
}

orError_t fuzzActivitySetLabelWithKind(int kind) {
  return orActivitySetLabel((orTaskKind)kind, "fuzz", NULL, NULL);
}
