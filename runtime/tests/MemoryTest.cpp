// Device and pinned memory: allocation, capacity, copies, memset, pointer queries, kernel pointers.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <stdexcept>
#include <thread>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

std::vector<std::uint8_t> pattern(std::size_t n, unsigned seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = static_cast<std::uint8_t>((i * 131 + seed * 7 + (i >> 8)) & 0xff);
  return v;
}

size_t capacity() {
  size_t free = 0, total = 0;
  EXPECT_EQ(orMemGetInfo(&free, &total), orSuccess);
  return total;
}

}  // namespace

TEST(Memory, MallocGivesADeviceAllocation) {
  void* p = nullptr;
  OR_OK(orMalloc(&p, 1000));
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 4096, 0u);
  orPointerAttributes a;
  OR_OK(orPointerGetAttributes(&a, static_cast<char*>(p) + 10));
  EXPECT_EQ(a.type, orMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.base, p);
  EXPECT_EQ(a.size, 1000u);
  EXPECT_EQ(a.hostPointer, nullptr);
  OR_OK(orFree(p));
  EXPECT_EQ(orPointerGetAttributes(&a, p), orErrorInvalidDevicePointer);
}

TEST(Memory, AllocationsOnEachDeviceAreDistinct) {
  void* p0 = nullptr;
  void* p1 = nullptr;
  void* q0 = nullptr;
  OR_OK(orMalloc(&p0, 4096));
  OR_OK(orMalloc(&q0, 1));
  OR_OK(orSetDevice(1));
  OR_OK(orMalloc(&p1, 4096));
  OR_OK(orSetDevice(0));
  orPointerAttributes a;
  OR_OK(orPointerGetAttributes(&a, p1));
  EXPECT_EQ(a.device, 1);
  EXPECT_NE(p0, q0);
  EXPECT_NE(p0, p1);
  OR_OK(orFree(p1));  // freeing memory of a device that is not current is fine
  OR_OK(orFree(p0));
  OR_OK(orFree(q0));
}

TEST(Memory, ZeroSizeAndNull) {
  void* p = reinterpret_cast<void*>(1);
  OR_OK(orMalloc(&p, 0));
  EXPECT_EQ(p, nullptr);
  OR_OK(orFree(nullptr));
  OR_OK(orFreeHost(nullptr));
  OR_OK(orMallocHost(&p, 0));
  EXPECT_EQ(p, nullptr);
}

TEST(Memory, BadFreesAreRejected) {
  void* p = nullptr;
  OR_OK(orMalloc(&p, 8192));
  EXPECT_EQ(orFree(static_cast<char*>(p) + 4096), orErrorInvalidDevicePointer);  // interior
  int host = 0;
  EXPECT_EQ(orFree(&host), orErrorInvalidDevicePointer);
  EXPECT_NE(lastMessage().find("double free"), std::string::npos);
  OR_OK(orFree(p));
  EXPECT_EQ(orFree(p), orErrorInvalidDevicePointer);  // double free
  EXPECT_EQ(orFreeHost(&host), orErrorInvalidValue);
  void* pinned = nullptr;
  OR_OK(orMallocHost(&pinned, 100));
  OR_OK(orFreeHost(pinned));
  EXPECT_EQ(orFreeHost(pinned), orErrorInvalidValue);
}

TEST(Memory, OutOfMemoryLeavesTheDeviceUsable) {
  const size_t total = capacity();
  void* p = nullptr;
  EXPECT_EQ(orMalloc(&p, total + 1), orErrorMemoryAllocation);
  EXPECT_EQ(orMalloc(&p, SIZE_MAX), orErrorMemoryAllocation);  // no overflow in rounding
  void* big = nullptr;
  OR_OK(orMalloc(&big, total - 8192));
  EXPECT_EQ(orMalloc(&p, 16384), orErrorMemoryAllocation);
  const std::string message = lastMessage();
  EXPECT_NE(message.find("out of memory on device 0"), std::string::npos) << message;
  EXPECT_NE(message.find("tried to allocate 16384 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("held by 1 allocations"), std::string::npos) << message;
  EXPECT_NE(message.find("OPENREG_DEVICE_MEMORY"), std::string::npos) << message;
  void* small = nullptr;
  OR_OK(orMalloc(&small, 8192));  // what is left still fits
  OR_OK(orFree(big));
  OR_OK(orMalloc(&p, 16384));
  const auto in = pattern(16384, 1);
  std::vector<std::uint8_t> out(16384);
  OR_OK(orMemcpy(p, in.data(), in.size(), orMemcpyHostToDevice));
  OR_OK(orMemcpy(out.data(), p, out.size(), orMemcpyDeviceToHost));
  EXPECT_EQ(in, out);
  OR_OK(orFree(p));
  OR_OK(orFree(small));
  size_t free = 0, total2 = 0;
  OR_OK(orMemGetInfo(&free, &total2));
  EXPECT_EQ(free, total);
}

TEST(Memory, FreedRangesCoalesce) {
  const size_t total = capacity();
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  OR_OK(orMalloc(&a, total / 4));
  OR_OK(orMalloc(&b, total / 4));
  OR_OK(orMalloc(&c, total / 4));
  OR_OK(orFree(a));
  OR_OK(orFree(c));
  OR_OK(orFree(b));  // joins both neighbours
  void* whole = nullptr;
  OR_OK(orMalloc(&whole, total));
  OR_OK(orFree(whole));
}

TEST(Memory, MemGetInfoTracksAllocations) {
  size_t free0 = 0, total = 0, free1 = 0;
  OR_OK(orMemGetInfo(&free0, &total));
  void* p = nullptr;
  OR_OK(orMalloc(&p, 5000));
  OR_OK(orMemGetInfo(&free1, &total));
  EXPECT_EQ(free0 - free1, 8192u);  // rounded to the 4096-byte alignment
  OR_OK(orFree(p));
  OR_OK(orMemGetInfo(&free1, &total));
  EXPECT_EQ(free1, free0);
}

TEST(Memory, CopiesRoundTripBetweenHostAndDevices) {
  const size_t n = (1 << 20) + 123;
  const auto in = pattern(n, 3);
  std::vector<std::uint8_t> out(n);
  void* d0 = nullptr;
  void* d0b = nullptr;
  void* d1 = nullptr;
  OR_OK(orMalloc(&d0, n));
  OR_OK(orMalloc(&d0b, n));
  OR_OK(orSetDevice(1));
  OR_OK(orMalloc(&d1, n));
  OR_OK(orSetDevice(0));
  OR_OK(orMemcpy(d0, in.data(), n, orMemcpyHostToDevice));
  OR_OK(orMemcpy(d0b, d0, n, orMemcpyDeviceToDevice));
  OR_OK(orMemcpy(d1, d0b, n, orMemcpyDeviceToDevice));  // across devices
  OR_OK(orMemcpy(out.data(), d1, n, orMemcpyDeviceToHost));
  EXPECT_EQ(in, out);
  std::vector<std::uint8_t> host(n);
  OR_OK(orMemcpy(host.data(), in.data(), n, orMemcpyHostToHost));
  EXPECT_EQ(in, host);
  OR_OK(orFree(d0));
  OR_OK(orFree(d0b));
  OR_OK(orFree(d1));
}

TEST(Memory, CopiesAtOffsetsInsideAnAllocation) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 4096));
  const auto in = pattern(100, 5);
  std::vector<std::uint8_t> out(100);
  char* inside = static_cast<char*>(d) + 3000;
  OR_OK(orMemcpy(inside, in.data(), 100, orMemcpyHostToDevice));
  OR_OK(orMemcpy(out.data(), inside, 100, orMemcpyDefault));
  EXPECT_EQ(in, out);
  OR_OK(orFree(d));
}

TEST(Memory, CopyDirectionAndRangesAreChecked) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 1000));
  std::vector<std::uint8_t> host(5000);
  EXPECT_EQ(orMemcpy(host.data(), d, 10, orMemcpyHostToDevice), orErrorInvalidMemcpyDirection);
  EXPECT_NE(lastMessage().find("declared host to device but the pointers are device to host"),
            std::string::npos)
      << lastMessage();
  EXPECT_EQ(orMemcpy(d, host.data(), 10, orMemcpyDeviceToHost), orErrorInvalidMemcpyDirection);
  EXPECT_EQ(orMemcpy(d, d, 10, orMemcpyHostToHost), orErrorInvalidMemcpyDirection);
  EXPECT_EQ(orMemcpy(d, host.data(), 10, static_cast<orMemcpyKind>(42)), orErrorInvalidValue);
  // Past the requested size (even though the 4096-byte block is reserved).
  EXPECT_EQ(orMemcpy(d, host.data(), 1001, orMemcpyHostToDevice), orErrorInvalidValue);
  EXPECT_EQ(orMemcpy(static_cast<char*>(d) + 999, host.data(), 2, orMemcpyHostToDevice),
            orErrorInvalidValue);
  EXPECT_EQ(orMemcpy(nullptr, host.data(), 2, orMemcpyHostToDevice), orErrorInvalidValue);
  EXPECT_EQ(orMemcpy(d, nullptr, 2, orMemcpyHostToDevice), orErrorInvalidValue);
  EXPECT_EQ(orMemcpy(d, host.data(), SIZE_MAX, orMemcpyHostToDevice), orErrorInvalidValue);
  OR_OK(orMemcpy(d, host.data(), 0, orMemcpyHostToDevice));  // nothing to do
  OR_OK(orFree(d));
  // A freed allocation is no longer a valid copy target.
  EXPECT_EQ(orMemcpy(d, host.data(), 10, orMemcpyHostToDevice), orErrorInvalidValue);
}

TEST(Memory, MemsetFillsBytesInStreamOrder) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 10000));
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  const auto in = pattern(10000, 9);
  void* pinned = nullptr;
  OR_OK(orMallocHost(&pinned, 10000));
  std::memcpy(pinned, in.data(), in.size());
  OR_OK(orMemcpyAsync(d, pinned, 10000, orMemcpyHostToDevice, s));
  OR_OK(orMemsetAsync(static_cast<char*>(d) + 100, 0xab, 50, s));
  std::vector<std::uint8_t> out(10000);
  OR_OK(orMemcpyAsync(out.data(), d, 10000, orMemcpyDeviceToHost, s));
  auto expected = in;
  std::fill(expected.begin() + 100, expected.begin() + 150, 0xab);
  EXPECT_EQ(out, expected);
  OR_OK(orMemset(d, 0, 10000));
  OR_OK(orMemcpy(out.data(), d, 10000, orMemcpyDeviceToHost));
  EXPECT_EQ(out, std::vector<std::uint8_t>(10000, 0));
  int host = 0;
  EXPECT_EQ(orMemset(&host, 0, 4), orErrorInvalidDevicePointer);
  EXPECT_EQ(orMemsetAsync(d, 0, 10001, s), orErrorInvalidValue);
  OR_OK(orStreamDestroy(s));
  OR_OK(orFreeHost(pinned));
  OR_OK(orFree(d));
}

TEST(Memory, PinnedCopiesAreAsynchronousPageableCopiesAreNot) {
  const size_t n = 1 << 16;
  void* d = nullptr;
  void* pinned = nullptr;
  OR_OK(orMalloc(&d, n));
  OR_OK(orMallocHost(&pinned, n));
  orPointerAttributes a;
  OR_OK(orPointerGetAttributes(&a, static_cast<char*>(pinned) + 5));
  EXPECT_EQ(a.type, orMemoryTypeHost);
  EXPECT_EQ(a.base, pinned);
  EXPECT_EQ(a.size, n);
  int plain = 0;
  OR_OK(orPointerGetAttributes(&a, &plain));
  EXPECT_EQ(a.type, orMemoryTypeUnregistered);
  EXPECT_EQ(a.device, -1);

  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::memset(pinned, 0x5a, n);
  Gate gate;
  OR_OK(launchGate(s, gate));
  OR_OK(orMemcpyAsync(d, pinned, n, orMemcpyHostToDevice, s));  // returns although the gate is shut
  EXPECT_EQ(orStreamQuery(s), orErrorNotReady);
  gate.open();
  OR_OK(orStreamSynchronize(s));

  // Pageable destination: the call returns only once the copy is done.
  std::vector<std::uint8_t> out(n);
  OR_OK(openreg::launch(s, [] { sleepMs(20); }));
  OR_OK(orMemcpyAsync(out.data(), d, n, orMemcpyDeviceToHost, s));
  EXPECT_EQ(orStreamQuery(s), orSuccess);
  EXPECT_EQ(out, std::vector<std::uint8_t>(n, 0x5a));
  OR_OK(orStreamDestroy(s));
  OR_OK(orFreeHost(pinned));
  OR_OK(orFree(d));
}

TEST(Memory, KernelPointerReachesDeviceMemoryFromATask) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 4096));
  void* k = nullptr;
  OR_OK(orGetKernelPointer(&k, static_cast<char*>(d) + 8));
  EXPECT_NE(k, static_cast<char*>(d) + 8);
  OR_OK(openreg::launch(nullptr, [k] { *static_cast<std::uint64_t*>(k) = 0x0123456789abcdefULL; }));
  std::uint64_t back = 0;
  OR_OK(orMemcpy(&back, static_cast<char*>(d) + 8, 8, orMemcpyDeviceToHost));
  EXPECT_EQ(back, 0x0123456789abcdefULL);
  int host = 0;
  EXPECT_EQ(orGetKernelPointer(&k, &host), orErrorInvalidDevicePointer);
  EXPECT_EQ(orGetKernelPointer(nullptr, d), orErrorInvalidValue);
  OR_OK(orFree(d));
}

TEST(Memory, FreeWaitsForWorkThatUsesTheMemory) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 4096));
  void* k = nullptr;
  OR_OK(orGetKernelPointer(&k, d));
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::atomic<bool> wrote{false};
  OR_OK(openreg::launch(s, [k, &wrote] {
    sleepMs(30);
    static_cast<char*>(k)[0] = 1;
    wrote.store(true);
  }));
  OR_OK(orFree(d));
  EXPECT_TRUE(wrote.load());
  OR_OK(orStreamDestroy(s));
}

TEST(Memory, FreedMemoryIsReturnedToTheSystem) {
  // A range handed out again reads as fresh memory: the old pages were punched out.
  void* d = nullptr;
  OR_OK(orMalloc(&d, 8192));
  OR_OK(orMemset(d, 0xff, 8192));
  OR_OK(orFree(d));
  void* again = nullptr;
  OR_OK(orMalloc(&again, 8192));
  ASSERT_EQ(again, d);  // best fit at the lowest address reuses the range
  std::vector<std::uint8_t> out(8192, 1);
  OR_OK(orMemcpy(out.data(), again, 8192, orMemcpyDeviceToHost));
  EXPECT_EQ(out, std::vector<std::uint8_t>(8192, 0));
  OR_OK(orFree(again));
}

// Found by the fuzzer: every device reaches every device's memory, so work queued on another
// device's stream may use the allocation too; freeing it must wait for that work as well, or the
// work writes into a range that may already belong to someone else.
TEST(Memory, FreeWaitsForWorkOfEveryDeviceThatUsesTheMemory) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 4096));  // on device 0
  void* k = nullptr;
  OR_OK(orGetKernelPointer(&k, d));
  orStream_t onDevice1;
  OR_OK(orDeviceGetDefaultStream(1, &onDevice1));
  std::atomic<bool> wrote{false};
  Gate gate;
  OR_OK(launchGate(onDevice1, gate));
  OR_OK(orMemsetAsync(d, 0x7f, 4096, onDevice1));  // device 1 writes device 0's memory
  OR_OK(openreg::launch(onDevice1, [&wrote] { wrote.store(true); }));
  std::thread opener([&gate] {
    sleepMs(30);
    gate.open();
  });
  OR_OK(orFree(d));
  EXPECT_TRUE(wrote.load());
  opener.join();
  OR_OK(orStreamSynchronize(onDevice1));  // had the free not waited, the memset has landed now
  // The range handed out again holds fresh memory, not the late memset.
  void* again = nullptr;
  OR_OK(orMalloc(&again, 4096));
  std::vector<std::uint8_t> out(4096, 1);
  OR_OK(orMemcpy(out.data(), again, 4096, orMemcpyDeviceToHost));
  EXPECT_EQ(out, std::vector<std::uint8_t>(4096, 0));
  OR_OK(orFree(again));
}

// An interior pointer or a double free is rejected before the free synchronizes anything, so a
// task error pending on the device is still reported by the next synchronizing call.
TEST(Memory, ABadFreeDoesNotSwallowAPendingTaskError) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 8192));
  OR_OK(openreg::launch(nullptr, [] { throw std::runtime_error("pending task error"); }));
  EXPECT_EQ(orFree(static_cast<char*>(d) + 4096), orErrorInvalidDevicePointer);
  void* pinned = nullptr;
  OR_OK(orMallocHost(&pinned, 8192));
  EXPECT_EQ(orFreeHost(static_cast<char*>(pinned) + 4096), orErrorInvalidValue);
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("pending task error"), std::string::npos) << lastMessage();
  OR_OK(orFreeHost(pinned));
  OR_OK(orFree(d));
}
