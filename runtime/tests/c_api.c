/* Uses the runtime from C: the header must compile as C99 and the library must link from C. */
#include <openreg/runtime.h>
#include <stdio.h>
#include <string.h>

#define CHECK(call)                                                                                \
  do {                                                                                             \
    orError_t e_ = (call);                                                                         \
    if (e_ != orSuccess) {                                                                         \
      fprintf(stderr, "%s failed: %s (%s)\n", #call, orGetErrorName(e_), orGetLastErrorMessage()); \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

static void addOne(void* arg) {
  ++*(int*)arg;
}

int main(void) {
  int count = 0, counter = 0;
  char in[256], out[256];
  void* dev = NULL;
  orStream_t stream;
  orEvent_t event;
  CHECK(orGetDeviceCount(&count));
  for (int i = 0; i < 256; ++i) in[i] = (char)i;
  CHECK(orMalloc(&dev, sizeof in));
  CHECK(orStreamCreate(&stream));
  CHECK(orEventCreate(&event));
  CHECK(orMemcpyAsync(dev, in, sizeof in, orMemcpyHostToDevice, stream));
  CHECK(orLaunchHostFunc(stream, addOne, &counter));
  CHECK(orEventRecord(event, stream));
  CHECK(orEventSynchronize(event));
  CHECK(orMemcpy(out, dev, sizeof out, orMemcpyDeviceToHost));
  CHECK(orEventDestroy(event));
  CHECK(orStreamDestroy(stream));
  CHECK(orFree(dev));
  if (count < 1 || counter != 1 || memcmp(in, out, sizeof in) != 0) {
    fprintf(stderr, "wrong results: count=%d counter=%d\n", count, counter);
    return 1;
  }
  printf("C API: %d devices, copy round trip and host function ok\n", count);
  return 0;
}
