// Runtime micro-benchmarks: launch cost, event cost, copy bandwidth against plain memcpy.
//
// Prints a table and one JSON object (also written to the file given as the first argument).
// Every figure is the median of several repeats in this one process; bandwidth is compared with
// a host memcpy of the same size measured in the same run.
#include <openreg/runtime.h>
#include <sys/mman.h>
#include <openreg/task.hpp>

#include "../runtime/examples/Check.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

// Median over `repeats` runs of fn(), which returns seconds.
double median(int repeats, const std::function<double()>& fn) {
  std::vector<double> samples;
  for (int i = 0; i < repeats; ++i) samples.push_back(fn());
  std::sort(samples.begin(), samples.end());
  return samples[samples.size() / 2];
}

void emptyTask(void*) {}

struct Result {
  std::string name;
  double value;
  std::string unit;
  std::string target;  // "" if the issue sets none
  bool met;
};

}  // namespace

int main(int argc, char** argv) {
  constexpr int kLaunches = 200000;
  constexpr int kRepeats = 7;
  std::vector<Result> results;

  orStream_t stream;
  OR_CHECK(orStreamCreate(&stream));

  // 1. Launch: a stream of 200,000 empty launches, then one synchronize, per launch.
  const double launchC = median(kRepeats, [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < kLaunches; ++i) OR_CHECK(orLaunchHostFunc(stream, emptyTask, nullptr));
    OR_CHECK(orStreamSynchronize(stream));
    return seconds(Clock::now() - t0) / kLaunches;
  });
  results.push_back({"orLaunchHostFunc, 200k empty tasks then sync", launchC * 1e9, "ns/launch",
                     "<= 1000", launchC * 1e9 <= 1000});
  const double launchCpp = median(kRepeats, [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < kLaunches; ++i) OR_CHECK(openreg::launch(stream, [] {}));
    OR_CHECK(orStreamSynchronize(stream));
    return seconds(Clock::now() - t0) / kLaunches;
  });
  results.push_back({"openreg::launch (C++ lambda), same", launchCpp * 1e9, "ns/launch", "", true});
  // Host-side cost alone: enqueue while a task holds the stream, so the worker never competes.
  // In rounds of 4,000, under the default OPENREG_QUEUE_DEPTH (8192): past it, a launch would
  // wait for the held task, which waits for the launches to finish.
  const double enqueueOnly = median(kRepeats, [&] {
    constexpr int kHeld = 4000;
    double s = 0;
    for (int round = 0; round < kLaunches / kHeld; ++round) {
      std::atomic<bool> open{false};
      OR_CHECK(openreg::launch(stream, [&open] {
        while (!open.load()) {
        }
      }));
      const auto t0 = Clock::now();
      for (int i = 0; i < kHeld; ++i) OR_CHECK(orLaunchHostFunc(stream, emptyTask, nullptr));
      s += seconds(Clock::now() - t0);
      open.store(true);
      OR_CHECK(orStreamSynchronize(stream));
    }
    return s / kLaunches;
  });
  results.push_back(
      {"orLaunchHostFunc host cost only (stream held)", enqueueOnly * 1e9, "ns/launch", "", true});

  // 2. Events: record, query, and a record + synchronize round trip on an idle stream.
  orEvent_t event;
  OR_CHECK(orEventCreateWithFlags(&event, orEventDisableTiming));
  constexpr int kEvents = 100000;
  const double record = median(kRepeats, [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < kEvents; ++i) OR_CHECK(orEventRecord(event, stream));
    const double s = seconds(Clock::now() - t0) / kEvents;
    OR_CHECK(orStreamSynchronize(stream));
    return s;
  });
  results.push_back({"orEventRecord", record * 1e9, "ns/call", "", true});
  const double query = median(kRepeats, [&] {
    const auto t0 = Clock::now();
    for (int i = 0; i < kEvents; ++i) {
      if (orEventQuery(event) != orSuccess) std::abort();
    }
    return seconds(Clock::now() - t0) / kEvents;
  });
  results.push_back({"orEventQuery (completed event)", query * 1e9, "ns/call", "", true});
  const double roundTrip = median(kRepeats, [&] {
    constexpr int kTrips = 2000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kTrips; ++i) {
      OR_CHECK(orEventRecord(event, stream));
      OR_CHECK(orEventSynchronize(event));
    }
    return seconds(Clock::now() - t0) / kTrips;
  });
  results.push_back(
      {"orEventRecord + orEventSynchronize round trip", roundTrip * 1e9, "ns", "", true});

  // 3. Kernel pointer translation and runtime allocation.
  void* small = nullptr;
  OR_CHECK(orMalloc(&small, 4096));
  const double translate = median(kRepeats, [&] {
    void* k = nullptr;
    const auto t0 = Clock::now();
    for (int i = 0; i < 1000000; ++i) {
      OR_CHECK(orGetKernelPointer(&k, static_cast<char*>(small) + (i & 1023)));
      asm volatile("" : : "r"(k) : "memory");
    }
    return seconds(Clock::now() - t0) / 1000000;
  });
  results.push_back({"orGetKernelPointer", translate * 1e9, "ns/call", "", true});
  OR_CHECK(orFree(small));
  const double mallocFree = median(kRepeats, [&] {
    constexpr int kPairs = 20000;
    const auto t0 = Clock::now();
    for (int i = 0; i < kPairs; ++i) {
      void* p = nullptr;
      OR_CHECK(orMalloc(&p, 1 << 20));
      OR_CHECK(orFree(p));
    }
    return seconds(Clock::now() - t0) / kPairs;
  });
  results.push_back({"orMalloc + orFree pair, 1 MiB", mallocFree * 1e9, "ns/pair", "", true});

  // 4. Bandwidth, device to device against memcpy, both on touched memory of the same size.
  for (size_t bytes : {size_t{8} << 20, size_t{64} << 20}) {
    void* a = nullptr;
    void* b = nullptr;
    OR_CHECK(orMalloc(&a, bytes));
    OR_CHECK(orMalloc(&b, bytes));
    OR_CHECK(orMemsetAsync(a, 1, bytes, stream));
    OR_CHECK(orMemsetAsync(b, 2, bytes, stream));
    std::vector<char> hostA(bytes, 1), hostB(bytes, 2);
    void* pinned = nullptr;
    OR_CHECK(orMallocHost(&pinned, bytes));
    std::memset(pinned, 3, bytes);
    OR_CHECK(orStreamSynchronize(stream));
    const int copies = bytes >= (size_t{64} << 20) ? 5 : 40;
    const double host = median(kRepeats, [&] {
      const auto t0 = Clock::now();
      for (int i = 0; i < copies; ++i) {
        std::memcpy(hostB.data(), hostA.data(), bytes);
        asm volatile("" : : "r"(hostB.data()) : "memory");
      }
      return seconds(Clock::now() - t0) / copies;
    });
    const double d2d = median(kRepeats, [&] {
      const auto t0 = Clock::now();
      for (int i = 0; i < copies; ++i)
        OR_CHECK(orMemcpyAsync(b, a, bytes, orMemcpyDeviceToDevice, stream));
      OR_CHECK(orStreamSynchronize(stream));
      return seconds(Clock::now() - t0) / copies;
    });
    const double h2d = median(kRepeats, [&] {
      const auto t0 = Clock::now();
      for (int i = 0; i < copies; ++i)
        OR_CHECK(orMemcpyAsync(b, pinned, bytes, orMemcpyHostToDevice, stream));
      OR_CHECK(orStreamSynchronize(stream));
      return seconds(Clock::now() - t0) / copies;
    });
    const std::string size = std::to_string(bytes >> 20) + " MiB";
    results.push_back({"memcpy (host) " + size, bytes / host / 1e9, "GB/s", "", true});
    results.push_back({"device to device " + size, bytes / d2d / 1e9, "GB/s", "", true});
    results.push_back(
        {"device to device / memcpy " + size, host / d2d, "ratio", ">= 0.9", host / d2d >= 0.9});
    results.push_back({"pinned host to device / memcpy " + size, host / h2d, "ratio", "", true});
    OR_CHECK(orFreeHost(pinned));
    OR_CHECK(orFree(a));
    OR_CHECK(orFree(b));
  }
  // 5. First touch: writing 64 MiB of never-used memory, device against fresh host pages.
  {
    const size_t bytes = size_t{64} << 20;
    const double device = median(kRepeats, [&] {
      void* p = nullptr;
      OR_CHECK(orMalloc(&p, bytes));  // fresh pages: the previous repeat's were punched out
      const auto t0 = Clock::now();
      OR_CHECK(orMemsetAsync(p, 1, bytes, stream));
      OR_CHECK(orStreamSynchronize(stream));
      const double s = seconds(Clock::now() - t0);
      OR_CHECK(orFree(p));
      return s;
    });
    const double host = median(kRepeats, [&] {
      void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      const auto t0 = Clock::now();
      std::memset(p, 1, bytes);
      const double s = seconds(Clock::now() - t0);
      munmap(p, bytes);
      return s;
    });
    results.push_back({"first touch 64 MiB, device memset", device * 1e3, "ms", "", true});
    results.push_back({"first touch 64 MiB, fresh host memset", host * 1e3, "ms", "", true});
  }

  OR_CHECK(orEventDestroy(event));
  OR_CHECK(orStreamDestroy(stream));

  std::printf("%-52s %12s  %-10s %s\n", "benchmark", "value", "unit", "target");
  for (const auto& r : results) {
    std::printf("%-52s %12.3f  %-10s %s%s\n", r.name.c_str(), r.value, r.unit.c_str(),
                r.target.c_str(), r.target.empty() ? "" : (r.met ? "  (met)" : "  (MISSED)"));
  }
  std::string json = "{\"benchmark\": \"runtime\", \"results\": [";
  for (size_t i = 0; i < results.size(); ++i) {
    char line[512];
    std::snprintf(line, sizeof line,
                  "%s{\"name\": \"%s\", \"value\": %.4f, \"unit\": \"%s\", \"target\": \"%s\"}",
                  i == 0 ? "" : ", ", results[i].name.c_str(), results[i].value,
                  results[i].unit.c_str(), results[i].target.c_str());
    json += line;
  }
  json += "]}\n";
  std::printf("%s", json.c_str());
  if (argc > 1) {
    if (FILE* f = std::fopen(argv[1], "w")) {
      std::fputs(json.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
