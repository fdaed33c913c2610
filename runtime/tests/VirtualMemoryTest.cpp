// Reserved address ranges and the memory mapped into them (orMemAddressReserve, orMemMap): Note
// [Reserved address ranges] in runtime/src/DeviceMemory.h.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

constexpr std::size_t kG = std::size_t{2} << 20;  // the granularity the header promises

std::size_t freeBytes() {
  size_t free = 0, total = 0;
  EXPECT_EQ(orMemGetInfo(&free, &total), orSuccess);
  return free;
}

std::size_t capacity() {
  size_t free = 0, total = 0;
  EXPECT_EQ(orMemGetInfo(&free, &total), orSuccess);
  return total;
}

char* at(void* base, std::size_t offset) {
  return static_cast<char*>(base) + offset;
}

std::vector<unsigned char> pattern(std::size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 31 + seed);
  return v;
}

bool contains(const std::string& text, const char* part) {
  return text.find(part) != std::string::npos;
}

// Sanitizer builds are several times slower; OPENREG_STRESS_SCALE shrinks the loops there.
int scaled(int n) {
  const char* scale = std::getenv("OPENREG_STRESS_SCALE");
  const int divisor = scale != nullptr ? std::max(1, std::atoi(scale)) : 1;
  return std::max(1, n / divisor);
}

// A task in the shape the PyTorch layer launches: fills bytes through the kernel window, or fails,
// and declares what it writes.
struct Fill {
  unsigned char* kernel = nullptr;
  const void* device = nullptr;
  std::size_t n = 0;
  unsigned char value = 0;
  bool fail = false;
  void operator()() const {
    if (fail) throw openreg::TaskError(3, "the fill kernel failed");
    std::memset(kernel, value, n);
  }
  void accesses(openreg::AccessList& list) const {
    list.push_back({device, n, /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

Fill fill(void* device, std::size_t n, unsigned char value, bool fail = false) {
  void* k = nullptr;
  EXPECT_EQ(orGetKernelPointer(&k, device), orSuccess);
  return Fill{static_cast<unsigned char*>(k), device, n, value, fail};
}

// A reservation of `granules` granules whose first two are mapped by two calls, so a range across
// their boundary spans two mappings.
void* reserveAndMapTwo(std::size_t granules) {
  void* r = nullptr;
  EXPECT_EQ(orMemAddressReserve(&r, granules * kG), orSuccess);
  EXPECT_EQ(orMemMap(r, kG), orSuccess);
  EXPECT_EQ(orMemMap(at(r, kG), kG), orSuccess);
  return r;
}

void unmapTwoAndRelease(void* r, std::size_t granules) {
  EXPECT_EQ(orMemUnmap(r, 2 * kG), orSuccess);  // both calls' mappings at once
  EXPECT_EQ(orMemAddressFree(r, granules * kG), orSuccess);
}

}  // namespace

TEST(VirtualMemory, TheGranularityIsTwoMiB) {
  size_t g = 0;
  OR_OK(orMemGetAllocationGranularity(&g));
  EXPECT_EQ(g, kG);
  EXPECT_EQ(orMemGetAllocationGranularity(nullptr), orErrorInvalidValue);
  EXPECT_TRUE(contains(lastMessage(), "orMemGetAllocationGranularity: granularity is NULL"));
}

TEST(VirtualMemory, AReservationMayExceedTheFreeMemoryButNotTheAddressSpace) {
  const std::size_t free = freeBytes();
  const std::size_t big = (2 * capacity() + kG - 1) / kG * kG;
  void* p = nullptr;
  OR_OK(orMemAddressReserve(&p, big));
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % kG, 0u);
  EXPECT_EQ(freeBytes(), free);  // reserving charges nothing
  orPointerAttributes attributes;
  EXPECT_EQ(orPointerGetAttributes(&attributes, p), orErrorInvalidDevicePointer);
  EXPECT_TRUE(contains(lastMessage(), "unmapped part of a reservation")) << lastMessage();

  void* huge = nullptr;
  EXPECT_EQ(orMemAddressReserve(&huge, std::size_t{1} << 50), orErrorMemoryAllocation);
  EXPECT_TRUE(contains(lastMessage(), "openreg: orMemAddressReserve: device 0's address space"))
      << lastMessage();
  EXPECT_EQ(orMemAddressReserve(&huge, 0), orErrorInvalidValue);
  EXPECT_EQ(orMemAddressReserve(&huge, kG + 4096), orErrorInvalidValue);
  EXPECT_TRUE(contains(lastMessage(), "not a positive multiple of the granularity"));
  EXPECT_EQ(orMemAddressReserve(nullptr, kG), orErrorInvalidValue);
  OR_OK(orMemAddressFree(p, big));
}

TEST(VirtualMemory, MappingIsChargedAgainstTheCapacityUntilUnmapped) {
  const std::size_t free = freeBytes();
  const std::size_t granules = free / kG;
  void* a = nullptr;
  void* b = nullptr;
  OR_OK(orMemAddressReserve(&a, granules * kG));
  OR_OK(orMemAddressReserve(&b, 2 * kG));
  OR_OK(orMemMap(a, granules * kG));  // all the device has
  EXPECT_EQ(freeBytes(), free - granules * kG);
  EXPECT_EQ(orMemMap(b, kG), orErrorMemoryAllocation);  // one granule more
  const std::string message = lastMessage();
  EXPECT_TRUE(contains(message, "openreg: orMemMap: out of memory on device 0: tried to map"))
      << message;
  EXPECT_TRUE(contains(message, "bytes mapped in 1 reservations")) << message;
  EXPECT_TRUE(contains(message, "OPENREG_DEVICE_MEMORY")) << message;
  // orMalloc sees the same budget.
  void* p = nullptr;
  EXPECT_EQ(orMalloc(&p, free - granules * kG + 4096), orErrorMemoryAllocation);
  EXPECT_TRUE(contains(lastMessage(), "bytes mapped in")) << lastMessage();

  // One granule unmapped in the middle: its capacity is back, and the next map takes it.
  OR_OK(orMemUnmap(at(a, kG), kG));
  EXPECT_EQ(freeBytes(), free - (granules - 1) * kG);
  OR_OK(orMemMap(b, kG));
  EXPECT_EQ(orMemMap(at(a, kG), kG), orErrorMemoryAllocation);
  OR_OK(orMemUnmap(b, kG));
  OR_OK(orMemMap(at(a, kG), kG));  // and back: the run is whole again
  OR_OK(orMemUnmap(a, granules * kG));
  EXPECT_EQ(freeBytes(), free);
  OR_OK(orMemAddressFree(a, granules * kG));
  OR_OK(orMemAddressFree(b, 2 * kG));
}

TEST(VirtualMemory, CopiesAndMemsetsSpanAdjacentMappingsOfSeparateCalls) {
  void* r = reserveAndMapTwo(4);
  // Fresh pages read as zeros.
  std::vector<unsigned char> out(2 * kG, 0xff);
  OR_OK(orMemcpy(out.data(), r, out.size(), orMemcpyDeviceToHost));
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](unsigned char c) { return c == 0; }));
  // A host-to-device copy across the boundary, a memset across it, and a read back.
  const auto in = pattern(2 * kG - 100, 5);
  OR_OK(orMemcpy(at(r, 50), in.data(), in.size(), orMemcpyHostToDevice));
  OR_OK(orMemset(at(r, kG - 10), 0x7a, 20));
  OR_OK(orMemcpy(out.data(), r, out.size(), orMemcpyDeviceToHost));
  auto expected = std::vector<unsigned char>(2 * kG, 0);
  std::copy(in.begin(), in.end(), expected.begin() + 50);
  std::fill(expected.begin() + kG - 10, expected.begin() + kG + 10, 0x7a);
  EXPECT_TRUE(out == expected);
  // Device to device, between the mapped run and an allocation, asynchronously too.
  void* p = nullptr;
  OR_OK(orMalloc(&p, 8192));
  OR_OK(orMemcpy(p, at(r, kG - 4096), 8192, orMemcpyDeviceToDevice));
  OR_OK(orMemcpyAsync(at(r, 2 * kG - 8192), p, 8192, orMemcpyDeviceToDevice, nullptr));
  OR_OK(orMemsetAsync(at(r, kG - 1), 1, 2, nullptr));
  OR_OK(orDeviceSynchronize());
  std::vector<unsigned char> tail(8192);
  OR_OK(orMemcpy(tail.data(), at(r, 2 * kG - 8192), tail.size(), orMemcpyDeviceToHost));
  EXPECT_TRUE(std::equal(tail.begin(), tail.end(), expected.begin() + kG - 4096));
  OR_OK(orFree(p));
  unmapTwoAndRelease(r, 4);
}

TEST(VirtualMemory, UnmappedGranulesOfAReservationAreNoDeviceMemory) {
  void* r = nullptr;
  OR_OK(orMemAddressReserve(&r, 3 * kG));
  OR_OK(orMemMap(r, kG));
  OR_OK(orMemMap(at(r, 2 * kG), kG));
  char host[64] = {};
  EXPECT_EQ(orMemcpy(at(r, kG), host, sizeof host, orMemcpyHostToDevice), orErrorInvalidValue);
  EXPECT_TRUE(contains(lastMessage(), "is not inside one live allocation on device 0"))
      << lastMessage();
  EXPECT_EQ(orMemcpy(host, at(r, kG - 32), sizeof host, orMemcpyDeviceToHost),
            orErrorInvalidValue);  // runs into the hole
  EXPECT_EQ(orMemcpy(host, at(r, 2 * kG - 32), sizeof host, orMemcpyDeviceToHost),
            orErrorInvalidValue);  // and from it into the next mapping
  EXPECT_EQ(orMemset(at(r, kG), 0, 16), orErrorInvalidValue);
  EXPECT_EQ(orMemsetAsync(at(r, kG - 8), 0, 16, nullptr), orErrorInvalidValue);
  EXPECT_EQ(orMemcpy(host, at(r, 3 * kG - 32), sizeof host, orMemcpyDeviceToHost),
            orErrorInvalidValue);  // past the reservation's end

  orPointerAttributes a;
  EXPECT_EQ(orPointerGetAttributes(&a, at(r, kG + 5)), orErrorInvalidDevicePointer);
  OR_OK(orPointerGetAttributes(&a, at(r, 2 * kG + 5)));
  EXPECT_EQ(a.type, orMemoryTypeDevice);
  EXPECT_EQ(a.device, 0);
  EXPECT_EQ(a.devicePointer, at(r, 2 * kG + 5));
  EXPECT_EQ(a.base, r);  // the reservation's, not the mapping's
  EXPECT_EQ(a.size, 3 * kG);

  // Map and unmap refuse what is not theirs to change.
  EXPECT_EQ(orMemMap(r, 2 * kG), orErrorInvalidValue);  // part already mapped
  EXPECT_TRUE(contains(lastMessage(), "openreg: orMemMap: part of")) << lastMessage();
  EXPECT_EQ(orMemMap(at(r, 2 * kG), 2 * kG), orErrorInvalidValue);  // past the end
  EXPECT_EQ(orMemMap(at(r, kG + 4096), kG), orErrorInvalidValue);   // misaligned
  EXPECT_EQ(orMemMap(at(r, kG), kG / 2), orErrorInvalidValue);
  EXPECT_EQ(orMemMap(host, kG), orErrorInvalidValue);  // not a device address
  EXPECT_TRUE(contains(lastMessage(), "is not a device address")) << lastMessage();
  EXPECT_EQ(orMemUnmap(r, 2 * kG), orErrorInvalidValue);  // not mapped in whole
  EXPECT_TRUE(contains(lastMessage(), "openreg: orMemUnmap: part of")) << lastMessage();
  EXPECT_EQ(orMemUnmap(at(r, kG), kG), orErrorInvalidValue);
  void* p = nullptr;
  OR_OK(orMalloc(&p, kG));
  EXPECT_EQ(orMemMap(p, kG), orErrorInvalidValue);  // an allocation is no reservation
  EXPECT_EQ(orMemUnmap(p, kG), orErrorInvalidValue);
  OR_OK(orFree(p));

  OR_OK(orMemUnmap(r, kG));
  OR_OK(orMemUnmap(at(r, 2 * kG), kG));
  OR_OK(orMemAddressFree(r, 3 * kG));
}

TEST(VirtualMemory, FreeAndIpcRefuseReservedMemory) {
  void* r = nullptr;
  OR_OK(orMemAddressReserve(&r, 2 * kG));
  OR_OK(orMemMap(r, kG));
  EXPECT_EQ(orFree(r), orErrorInvalidDevicePointer);
  EXPECT_TRUE(contains(lastMessage(), "orMemUnmap")) << lastMessage();
  EXPECT_EQ(orFree(at(r, kG)), orErrorInvalidDevicePointer);  // unmapped part
  EXPECT_TRUE(contains(lastMessage(), "orMemAddressFree")) << lastMessage();
  orIpcMemHandle_t handle;
  EXPECT_EQ(orIpcGetMemHandle(&handle, r), orErrorInvalidValue);
  EXPECT_TRUE(contains(lastMessage(), "cannot be shared between processes")) << lastMessage();
  EXPECT_EQ(orIpcGetMemHandle(&handle, at(r, 100)), orErrorInvalidValue);
  OR_OK(orMemUnmap(r, kG));
  OR_OK(orMemAddressFree(r, 2 * kG));
}

TEST(VirtualMemory, AReservationIsReleasedWholeAndOnlyOnceNothingIsMapped) {
  void* r = nullptr;
  OR_OK(orMemAddressReserve(&r, 4 * kG));
  OR_OK(orMemMap(at(r, 3 * kG), kG));
  EXPECT_EQ(orMemAddressFree(r, 4 * kG), orErrorInvalidValue);
  EXPECT_TRUE(contains(lastMessage(), "still mapped")) << lastMessage();
  EXPECT_EQ(orMemAddressFree(r, 2 * kG), orErrorInvalidValue);          // not its size
  EXPECT_EQ(orMemAddressFree(at(r, kG), 3 * kG), orErrorInvalidValue);  // not its start
  OR_OK(orMemUnmap(at(r, 3 * kG), kG));
  OR_OK(orMemAddressFree(r, 4 * kG));
  EXPECT_EQ(orMemAddressFree(r, 4 * kG), orErrorInvalidValue);  // released before
  EXPECT_TRUE(contains(lastMessage(), "not the start of a reservation")) << lastMessage();
  EXPECT_EQ(orMemMap(r, kG), orErrorInvalidValue);  // its addresses are no one's now
  // Released addresses are reserved again.
  void* again = nullptr;
  OR_OK(orMemAddressReserve(&again, 4 * kG));
  EXPECT_EQ(again, r);
  OR_OK(orMemAddressFree(again, 4 * kG));
}

TEST(VirtualMemory, AllocationsAndReservationsNeverOverlap) {
  std::vector<std::pair<std::uintptr_t, std::size_t>> ranges;  // (start, size)
  std::vector<void*> allocations;
  std::vector<std::pair<void*, std::size_t>> reservations;
  for (int i = 0; i < 40; ++i) {
    void* p = nullptr;
    const std::size_t bytes = 4096 * (1 + i % 7) + (i % 3 == 0 ? kG : 0);
    OR_OK(orMalloc(&p, bytes));
    allocations.push_back(p);
    ranges.emplace_back(reinterpret_cast<std::uintptr_t>(p), bytes);
    if (i % 4 == 0) {
      const std::size_t size = kG * (1 + i % 5);
      OR_OK(orMemAddressReserve(&p, size));
      reservations.emplace_back(p, size);
      ranges.emplace_back(reinterpret_cast<std::uintptr_t>(p), size);
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (std::size_t i = 1; i < ranges.size(); ++i) {
    EXPECT_LE(ranges[i - 1].first + ranges[i - 1].second, ranges[i].first) << i;
  }
  for (void* p : allocations) {
    orPointerAttributes a;
    OR_OK(orPointerGetAttributes(&a, p));
    EXPECT_EQ(a.base, p);
    OR_OK(orFree(p));
  }
  for (auto [p, size] : reservations) OR_OK(orMemAddressFree(p, size));
}

TEST(VirtualMemory, ATaskWritesMappedMemoryThroughTheKernelWindow) {
  void* r = reserveAndMapTwo(2);
  // One constant translates every address of the reservation, across the two mappings.
  void* k0 = nullptr;
  void* k1 = nullptr;
  OR_OK(orGetKernelPointer(&k0, r));
  OR_OK(orGetKernelPointer(&k1, at(r, kG + 123)));
  EXPECT_EQ(static_cast<char*>(k1) - static_cast<char*>(k0), static_cast<std::ptrdiff_t>(kG + 123));
  OR_OK(openreg::launch(nullptr, fill(at(r, kG - 64), 128, 0x5c)));
  OR_OK(orDeviceSynchronize());
  unsigned char out[256];
  OR_OK(orMemcpy(out, at(r, kG - 128), sizeof out, orMemcpyDeviceToHost));
  for (int i = 0; i < 256; ++i) {
    ASSERT_EQ(out[i], i >= 64 && i < 192 ? 0x5c : 0) << i;
  }
  unmapTwoAndRelease(r, 2);
}

TEST(VirtualMemory, PoisonAndReuseWorkOnMappedMemoryAsOnAllocations) {
  void* r = reserveAndMapTwo(3);
  void* block = at(r, kG - 512);  // a block across the two mappings
  OR_OK(openreg::launch(nullptr, fill(block, 1024, 1, /*fail=*/true)));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  unsigned char host[1024];
  EXPECT_EQ(orMemcpy(host, block, sizeof host, orMemcpyDeviceToHost), orErrorLaunchFailure);
  EXPECT_TRUE(contains(lastMessage(), "the fill kernel failed")) << lastMessage();
  EXPECT_EQ(orMemcpy(host, at(r, kG + 400), 16, orMemcpyDeviceToHost), orErrorLaunchFailure);
  // With poison about, orMemReuse checks its range: mapped in whole, or refused.
  EXPECT_EQ(orMemReuse(at(r, 2 * kG), 64, nullptr), orErrorInvalidDevicePointer);
  EXPECT_TRUE(contains(lastMessage(), "nor mapped in whole in one reservation")) << lastMessage();
  EXPECT_EQ(orMemReuse(at(r, 2 * kG - 32), 64, nullptr), orErrorInvalidDevicePointer);
  OR_OK(
      orMemReuse(at(r, kG - 512), 512, nullptr));  // half the block: the other half stays poisoned
  OR_OK(orMemcpy(host, block, 512, orMemcpyDeviceToHost));
  EXPECT_EQ(orMemcpy(host, at(r, kG), 512, orMemcpyDeviceToHost), orErrorLaunchFailure);
  // Unmapping clears what is left: a new mapping there is fresh memory.
  OR_OK(orMemUnmap(at(r, kG), kG));
  OR_OK(orMemMap(at(r, kG), kG));
  OR_OK(orMemcpy(host, block, sizeof host, orMemcpyDeviceToHost));
  EXPECT_TRUE(std::all_of(host, host + sizeof host, [](unsigned char c) { return c == 0; }));
  unmapTwoAndRelease(r, 3);
}

TEST(VirtualMemory, AReservationOfAnotherDeviceIsMappedWithThatDevicesMemory) {
  int count = 0;
  OR_OK(orGetDeviceCount(&count));
  if (count < 2) GTEST_SKIP() << "needs two devices";
  OR_OK(orSetDevice(1));
  const std::size_t free1 = freeBytes();
  void* r = nullptr;
  OR_OK(orMemAddressReserve(&r, kG));
  OR_OK(orSetDevice(0));
  const std::size_t free0 = freeBytes();
  OR_OK(orMemMap(r, kG));
  orPointerAttributes a;
  OR_OK(orPointerGetAttributes(&a, r));
  EXPECT_EQ(a.device, 1);
  EXPECT_EQ(freeBytes(), free0);
  OR_OK(orSetDevice(1));
  EXPECT_EQ(freeBytes(), free1 - kG);
  OR_OK(orMemUnmap(r, kG));
  OR_OK(orMemAddressFree(r, kG));
  EXPECT_EQ(freeBytes(), free1);
  OR_OK(orSetDevice(0));
}

TEST(VirtualMemory, TwoThreadsMapAndUnmapConcurrently) {
  const std::size_t free = freeBytes();
  constexpr std::size_t kGranules = 16;
  void* shared = nullptr;
  OR_OK(orMemAddressReserve(&shared, 2 * kGranules * kG));
  const int rounds = scaled(400);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      // Each thread owns half of one reservation, and churns a reservation of its own beside it.
      char* half = at(shared, t * kGranules * kG);
      unsigned char in[64], out[64];
      for (int i = 0; i < rounds; ++i) {
        const std::size_t first = (i * 7 + t) % kGranules;
        const std::size_t n = 1 + i % std::min<std::size_t>(3, kGranules - first);
        char* p = half + first * kG;
        void* own = nullptr;
        std::memset(in, i + t, sizeof in);
        bool mapped = true;
        for (std::size_t g = 0; g < n; ++g)
          mapped = mapped && orMemMap(p + g * kG, kG) == orSuccess;
        // Across the first two granules' boundary when there are two, each mapped by its call.
        char* q = p + (n > 1 ? kG - sizeof in / 2 : 100);
        if (!mapped || orMemcpy(q, in, sizeof in, orMemcpyHostToDevice) != orSuccess ||
            orMemcpy(out, q, sizeof out, orMemcpyDeviceToHost) != orSuccess ||
            std::memcmp(in, out, sizeof in) != 0 || orMemUnmap(p, n * kG) != orSuccess ||
            orMemAddressReserve(&own, kG * (1 + i % 3)) != orSuccess ||
            orMemAddressFree(own, kG * (1 + i % 3)) != orSuccess) {
          failures.fetch_add(1);
          std::fprintf(stderr, "thread %d round %d: %s\n", t, i, orGetLastErrorMessage());
          return;
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(freeBytes(), free);
  OR_OK(orMemAddressFree(shared, 2 * kGranules * kG));
}

TEST(VirtualMemoryDeathTest, AHostAccessToMappedMemoryIsReported) {
  EXPECT_EXIT(
      {
        void* r = nullptr;
        orMemAddressReserve(&r, 2 * kG);
        orMemMap(r, kG);
        static_cast<volatile int*>(r)[4] = 1;
      },
      ::testing::KilledBySignal(SIGSEGV),
      "host code touched openreg device memory: address 0x[0-9a-f]+ is on device 0, mapped "
      "memory inside the reservation at 0x[0-9a-f]+ of 4194304 bytes \\(offset 16\\)");
}
