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

/* A task object as a C caller writes one (Note [Tasks across the C ABI] in runtime.h): the
 * runtime keeps its bytes in the stream's queue and reaches it only through fillOps. */
typedef struct FillTask {
  unsigned char* kernelPtr; /* where the worker writes */
  const void* devPtr;       /* the same bytes as the device address the task declares */
  size_t bytes;
  unsigned char value;
  int refuse; /* fail instead of filling */
} FillTask;

static int destroyed = 0;

static void fillRun(void* task, orTaskContext_t context) {
  const FillTask* t = (const FillTask*)task;
  if (t->refuse) {
    orTaskFail(context, 7, "the fill task refused");
    return;
  }
  memset(t->kernelPtr, t->value, t->bytes);
}
static void fillRelocate(void* dst, void* src) {
  memcpy(dst, src, sizeof(FillTask));
}
static void fillDestroy(void* task) {
  (void)task;
  ++destroyed;
}
static size_t fillAccesses(const void* task, orMemoryAccess* out, size_t capacity) {
  const FillTask* t = (const FillTask*)task;
  if (capacity >= 1) {
    out[0].ptr = t->devPtr;
    out[0].bytes = t->bytes;
    out[0].read = false;
    out[0].write = true;
    out[0].cover = true;
  }
  return 1;
}
static const char* fillName(const void* task) {
  (void)task;
  return "fill";
}
static const orTaskOps fillOps = {fillRun, fillRelocate, fillDestroy, fillAccesses, fillName};

/* Fills `dev` with `value` through a task (refusing if asked), waiting for it. */
static orError_t fill(void* dev, size_t bytes, unsigned char value, int refuse) {
  FillTask task;
  void* kernelPtr = NULL;
  orError_t e = orGetKernelPointer(&kernelPtr, dev);
  if (e != orSuccess) return e;
  task.kernelPtr = (unsigned char*)kernelPtr;
  task.devPtr = dev;
  task.bytes = bytes;
  task.value = value;
  task.refuse = refuse;
  return orLaunchTask(NULL, &fillOps, &task, sizeof task, orLaunchTaskWait);
}

/* Tasks from C: a fill runs, a refused fill fails with its category and message and poisons what
 * it declared, a copy of the poisoned bytes fails the same way, a covering fill heals them, and
 * the runtime destroys every task object it took. */
static int checkTasks(void* dev, size_t bytes) {
  unsigned char host[256];
  int category = -1;
  orError_t e;
  CHECK(fill(dev, bytes, 5, 0));
  CHECK(orMemcpy(host, dev, bytes, orMemcpyDeviceToHost));
  if (host[0] != 5 || host[bytes - 1] != 5) {
    fprintf(stderr, "the fill task did not fill: %d %d\n", host[0], host[bytes - 1]);
    return 1;
  }
  e = fill(dev, bytes, 6, 1);
  CHECK(orGetLastErrorCategory(&category));
  if (e != orErrorLaunchFailure || category != 7 ||
      strstr(orGetLastErrorMessage(), "the fill task refused") == NULL) {
    fprintf(stderr, "refused fill: %s, category %d, message '%s'\n", orGetErrorName(e), category,
            orGetLastErrorMessage());
    return 1;
  }
  e = orMemcpy(host, dev, bytes, orMemcpyDeviceToHost);
  CHECK(orGetLastErrorCategory(&category));
  if (e != orErrorLaunchFailure || category != 7) {
    fprintf(stderr, "copy of poisoned memory: %s, category %d\n", orGetErrorName(e), category);
    return 1;
  }
  CHECK(fill(dev, bytes, 8, 0));
  CHECK(orMemcpy(host, dev, bytes, orMemcpyDeviceToHost));
  CHECK(orDeviceSynchronize());
  if (host[0] != 8 || destroyed != 3) {
    fprintf(stderr, "after the covering fill: %d, %d task objects destroyed (3 launched)\n",
            host[0], destroyed);
    return 1;
  }
  return 0;
}

/* Expandable memory from C: a reservation, two adjacent mappings, a copy across them. */
static int checkVirtualMemory(void) {
  size_t granularity = 0;
  void* reserved = NULL;
  char in[64], out[64];
  CHECK(orMemGetAllocationGranularity(&granularity));
  CHECK(orMemAddressReserve(&reserved, 2 * granularity));
  CHECK(orMemMap(reserved, granularity));
  CHECK(orMemMap((char*)reserved + granularity, granularity));
  for (int i = 0; i < 64; ++i) in[i] = (char)(i + 1);
  CHECK(orMemcpy((char*)reserved + granularity - 32, in, sizeof in, orMemcpyHostToDevice));
  CHECK(orMemcpy(out, (char*)reserved + granularity - 32, sizeof out, orMemcpyDeviceToHost));
  CHECK(orMemUnmap(reserved, 2 * granularity));
  CHECK(orMemAddressFree(reserved, 2 * granularity));
  if (memcmp(in, out, sizeof in) != 0) {
    fprintf(stderr, "the copy across two mappings did not read back\n");
    return 1;
  }
  return 0;
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
  if (checkTasks(dev, sizeof in) != 0) return 1;
  if (checkVirtualMemory() != 0) return 1;
  CHECK(orEventDestroy(event));
  CHECK(orStreamDestroy(stream));
  CHECK(orFree(dev));
  if (count < 1 || counter != 1 || memcmp(in, out, sizeof in) != 0) {
    fprintf(stderr, "wrong results: count=%d counter=%d\n", count, counter);
    return 1;
  }
  printf("C API: %d devices, copy round trip, host function, tasks and mappings ok\n", count);
  return 0;
}
