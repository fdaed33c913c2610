// A tour of libopenreg: devices, memory, streams, events, an asynchronous launch, copies, timing.
// Built as `runtime_tour`; `make demo` runs it until the PyTorch backend exists.
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include "Check.h"

#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <vector>

int main() {
  int count = 0;
  OR_CHECK(orGetDeviceCount(&count));
  std::printf("libopenreg %d: %d devices\n", OPENREG_RUNTIME_VERSION, count);
  for (int d = 0; d < count; ++d) {
    orDeviceProp p;
    OR_CHECK(orGetDeviceProperties(&p, d));
    std::printf("  device %d: %s, %.1f GiB, %d worker(s)\n", d, p.name,
                static_cast<double>(p.totalGlobalMem) / (1 << 30), p.workerCount);
  }

  // 64 MiB of floats: fill on the host, copy to device 0, square on a stream, copy to device 1.
  const size_t n = 16 << 20, bytes = n * sizeof(float);
  std::vector<float> host(n);
  std::iota(host.begin(), host.end(), 0.0f);
  float* pinned = nullptr;
  OR_CHECK(orMallocHost(reinterpret_cast<void**>(&pinned), bytes));
  std::copy(host.begin(), host.end(), pinned);

  void* d0 = nullptr;
  void* d1 = nullptr;
  OR_CHECK(orSetDevice(0));
  OR_CHECK(orMalloc(&d0, bytes));
  orStream_t s0;
  orEvent_t start, afterCopy, afterKernel;
  OR_CHECK(orStreamCreate(&s0));
  OR_CHECK(orEventCreate(&start));
  OR_CHECK(orEventCreate(&afterCopy));
  OR_CHECK(orEventCreate(&afterKernel));

  OR_CHECK(orEventRecord(start, s0));
  OR_CHECK(orMemcpyAsync(d0, pinned, bytes, orMemcpyHostToDevice, s0));
  OR_CHECK(orEventRecord(afterCopy, s0));
  float* k = nullptr;
  OR_CHECK(orGetKernelPointer(reinterpret_cast<void**>(&k), d0));
  OR_CHECK(openreg::launch(s0, [k, n] {
    for (size_t i = 0; i < n; ++i) k[i] = k[i] * k[i];
  }));
  OR_CHECK(orEventRecord(afterKernel, s0));
  std::printf("launched copy + kernel on device 0; stream query right after: %s\n",
              orGetErrorName(orStreamQuery(s0)));

  // Device 1's default stream waits for device 0's kernel, then pulls the result across.
  OR_CHECK(orSetDevice(1));
  OR_CHECK(orMalloc(&d1, bytes));
  OR_CHECK(orStreamWaitEvent(nullptr, afterKernel, 0));
  OR_CHECK(orMemcpyAsync(d1, d0, bytes, orMemcpyDeviceToDevice, nullptr));
  OR_CHECK(orMemcpyAsync(pinned, d1, bytes, orMemcpyDeviceToHost, nullptr));
  OR_CHECK(orDeviceSynchronize());

  float copyMs = 0, kernelMs = 0;
  OR_CHECK(orEventElapsedTime(&copyMs, start, afterCopy));
  OR_CHECK(orEventElapsedTime(&kernelMs, afterCopy, afterKernel));
  std::printf("host to device copy of %zu MiB: %.2f ms (%.1f GB/s)\n", bytes >> 20, copyMs,
              bytes / (copyMs * 1e6));
  std::printf("square kernel over %zu floats: %.2f ms\n", n, kernelMs);
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += pinned[i] != host[i] * host[i];
  std::printf("result checked against the host: %zu mismatches\n", bad);

  size_t free = 0, total = 0;
  OR_CHECK(orMemGetInfo(&free, &total));
  std::printf("device 1 memory: %zu MiB used of %zu MiB\n", (total - free) >> 20, total >> 20);

  void* tooBig = nullptr;
  orError_t oom = orMalloc(&tooBig, total + 1);
  std::printf("allocating more than the capacity: %s\n  %s\n", orGetErrorName(oom),
              orGetLastErrorMessage());

  OR_CHECK(orFree(d1));
  OR_CHECK(orSetDevice(0));
  OR_CHECK(orFree(d0));
  OR_CHECK(orFreeHost(pinned));
  for (orEvent_t e : {start, afterCopy, afterKernel}) OR_CHECK(orEventDestroy(e));
  OR_CHECK(orStreamDestroy(s0));
  return bad == 0 ? 0 : 1;
}
