// Caching allocator against the runtime: time per allocate/free pair, and device allocations in a
// steady-state loop. Prints a table and one JSON object (also written to argv[1] if given).
// Each figure is the median of 7 repeats in this one process.
#include <c10/core/Stream.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "../runtime/examples/Check.h"
#include "core/allocator/DeviceAllocator.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(int repeats, const std::function<double()>& fn) {
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) samples.push_back(fn());
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

double perPair(int pairs, const std::function<void()>& pair) {
  const auto t0 = Clock::now();
  for (int i = 0; i < pairs; ++i) pair();
  return std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / pairs;
}

}  // namespace

int main(int argc, char** argv) {
  constexpr int kRepeats = 7;
  OR_CHECK(orInit(0));
  auto& allocator = openreg::deviceAllocator();
  std::string json = "{\"benchmark\": \"allocator\", \"results\": [";
  std::printf("%-12s %22s %22s %10s\n", "size", "caching alloc+free ns", "orMalloc+orFree ns",
              "ratio");
  bool first = true;
  for (size_t size : {size_t{4096}, size_t{1} << 20, size_t{64} << 20}) {
    const int pairs = size >= (size_t{64} << 20) ? 2000 : 20000;
    allocator.allocate(size);  // warm: the first segment comes from the runtime
    const double caching =
        median(kRepeats, [&] { return perPair(pairs, [&] { allocator.allocate(size); }); });
    const double runtime = median(kRepeats, [&] {
      return perPair(pairs, [&] {
        void* p = nullptr;
        OR_CHECK(orMalloc(&p, size));
        OR_CHECK(orFree(p));
      });
    });
    std::printf("%-12zu %22.1f %22.1f %10.3f\n", size, caching, runtime, caching / runtime);
    char row[256];
    std::snprintf(row, sizeof row,
                  "%s{\"size\": %zu, \"caching_ns\": %.1f, \"runtime_ns\": %.1f, \"ratio\": %.4f}",
                  first ? "" : ", ", size, caching, runtime, caching / runtime);
    json += row;
    first = false;
  }

  // Steady state: the same sizes freed and allocated again make no runtime allocation.
  const std::vector<size_t> sizes = {512, 4096, 300000, size_t{3} << 20, size_t{12} << 20};
  for (size_t s : sizes) allocator.allocate(s);
  const int64_t before = allocator.getDeviceStats(0).num_device_alloc;
  constexpr int kIterations = 10000;
  for (int i = 0; i < kIterations; ++i) {
    std::vector<c10::DataPtr> live;
    for (size_t s : sizes) live.push_back(allocator.allocate(s));
  }
  const int64_t steady = allocator.getDeviceStats(0).num_device_alloc - before;
  std::printf(
      "steady state: %d iterations of %zu allocations, %lld new device allocations (target 0)\n",
      kIterations, sizes.size(), static_cast<long long>(steady));
  json += "], \"steady_state_iterations\": " + std::to_string(kIterations) +
          ", \"steady_state_device_allocations\": " + std::to_string(steady) + "}\n";
  std::printf("%s", json.c_str());
  if (argc > 1) {
    if (FILE* f = std::fopen(argv[1], "w")) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  return steady == 0 ? 0 : 1;
}
