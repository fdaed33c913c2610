// Task activity (openreg/activity.hpp): what a profiler reads of the device.
#include <openreg/activity.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

// Every activity recorded while `work` runs.
template <class F>
std::vector<openreg::TaskActivity> record(F&& work) {
  EXPECT_TRUE(openreg::beginTaskActivity());
  work();
  return openreg::endTaskActivity();
}

}  // namespace

TEST(Activity, NothingIsRecordedWhenNoRecordingIsOn) {
  OR_OK(openreg::launch(nullptr, [] {}));
  OR_OK(orDeviceSynchronize());
  EXPECT_FALSE(openreg::taskActivityOn());
  EXPECT_TRUE(openreg::endTaskActivity().empty());
  // A recording started afterwards holds none of the earlier tasks.
  const auto tasks = record([] {});
  EXPECT_TRUE(tasks.empty());
}

TEST(Activity, TaskIsTimedByTheWorkerOnItsStreamWithItsCorrelation) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  const auto tasks = record([&] {
    openreg::pushLaunchCorrelation(41);
    openreg::pushLaunchCorrelation(42);  // the innermost id is the one a task carries
    const openreg::ScopedTaskLabel label(orTaskKindKernel, "sleep 30 ms");
    ASSERT_TRUE(ok(openreg::launch(s, [] { sleepMs(30); })));
    openreg::popLaunchCorrelation();
    openreg::popLaunchCorrelation();
  });
  ASSERT_EQ(tasks.size(), 1u);
  const openreg::TaskActivity& t = tasks[0];
  EXPECT_EQ(t.kind, orTaskKindKernel);
  EXPECT_STREQ(t.name, "sleep 30 ms");
  EXPECT_EQ(t.device, 0);
  EXPECT_EQ(t.stream, reinterpret_cast<std::uint64_t>(s));
  EXPECT_EQ(t.correlation, 42u);
  EXPECT_GE(t.endNs - t.startNs, 30'000'000);
  EXPECT_LE(t.launchNs, t.startNs);
  EXPECT_FALSE(t.failed);
  OR_OK(orStreamDestroy(s));
}

TEST(Activity, EndWaitsForTasksStillQueued) {
  Gate gate;
  std::vector<openreg::TaskActivity> tasks;
  ASSERT_TRUE(openreg::beginTaskActivity());
  OR_OK(launchGate(nullptr, gate));
  OR_OK(openreg::launch(nullptr, [] {}));
  gate.waitEntered();
  std::thread opener([&] {
    sleepMs(20);
    gate.open();
  });
  tasks = openreg::endTaskActivity();  // returns only once both tasks have run
  opener.join();
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_LE(tasks[0].endNs, tasks[1].startNs);  // in stream order
  EXPECT_EQ(tasks[0].name, nullptr);
}

TEST(Activity, CopiesAndMemsetsAreNamedByDirection) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 256));
  std::vector<char> host(256, 7);
  const auto tasks = record([&] {
    ASSERT_TRUE(ok(orMemset(d, 1, 256)));
    ASSERT_TRUE(ok(orMemcpy(d, host.data(), 256, orMemcpyHostToDevice)));
    ASSERT_TRUE(ok(orMemcpy(host.data(), d, 256, orMemcpyDeviceToHost)));
  });
  ASSERT_EQ(tasks.size(), 3u);
  EXPECT_EQ(tasks[0].kind, orTaskKindMemset);
  EXPECT_STREQ(tasks[0].name, "Memset");
  EXPECT_EQ(tasks[1].kind, orTaskKindMemcpy);
  EXPECT_STREQ(tasks[1].name, "Memcpy HtoD");
  EXPECT_STREQ(tasks[2].name, "Memcpy DtoH");
  OR_OK(orFree(d));
}

namespace {
// A kernel that declares it writes `ptr` and fails: it poisons those bytes.
struct FailingWrite {
  void* ptr;
  std::size_t bytes;
  void operator()() const { throw std::runtime_error("planted"); }
  void accesses(openreg::AccessList& out) const {
    out.push_back({ptr, bytes, /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};
}  // namespace

TEST(Activity, FailedTasksAndTasksSkippedForPoisonedInputsAreMarkedFailed) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 64));
  void* k = nullptr;
  OR_OK(orGetKernelPointer(&k, d));
  std::vector<char> host(64);
  const auto tasks = record([&] {
    ASSERT_TRUE(ok(openreg::launch(nullptr, FailingWrite{k, 64})));
    // Reads the poisoned bytes: does not run, fails with the kernel's failure.
    EXPECT_EQ(orMemcpy(host.data(), d, 64, orMemcpyDeviceToHost), orErrorLaunchFailure);
    orDeviceSynchronize();
  });
  ASSERT_EQ(tasks.size(), 2u);
  EXPECT_TRUE(tasks[0].failed);
  EXPECT_TRUE(tasks[1].failed);
  EXPECT_STREQ(tasks[1].name, "Memcpy DtoH");
  OR_OK(orFree(d));
}

TEST(Activity, OneRecordingAtATime) {
  ASSERT_TRUE(openreg::beginTaskActivity());
  EXPECT_TRUE(openreg::taskActivityOn());
  EXPECT_FALSE(openreg::beginTaskActivity());
  openreg::endTaskActivity();
  EXPECT_FALSE(openreg::taskActivityOn());
}

TEST(Activity, LaunchesFromSeveralThreadsAreAllRecorded) {
  const auto tasks = record([] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([t] {
        openreg::pushLaunchCorrelation(100 + t);
        for (int i = 0; i < 250; ++i) EXPECT_TRUE(ok(openreg::launch(nullptr, [] {})));
        openreg::popLaunchCorrelation();
      });
    }
    for (auto& th : threads) th.join();
  });
  ASSERT_EQ(tasks.size(), 1000u);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(std::count_if(tasks.begin(), tasks.end(),
                            [t](const auto& a) { return a.correlation == 100u + t; }),
              250);
  }
}

TEST(Activity, HostActivityIsAnEntryOnItsStreamFromStartToEnd) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  openreg::HostActivity idle;
  idle.begin(s, "off");  // no recording: nothing is taken
  EXPECT_FALSE(idle.active());
  const auto tasks = record([&] {
    openreg::pushLaunchCorrelation(7);
    openreg::HostActivity a;
    a.begin(s, "host work");
    openreg::popLaunchCorrelation();
    EXPECT_TRUE(a.active());
    std::thread worker([&] {  // another host thread does the work
      a.start();
      sleepMs(20);
      a.end(/*failed=*/true);
    });
    worker.join();
    EXPECT_FALSE(a.active());
  });
  ASSERT_EQ(tasks.size(), 1u);
  const openreg::TaskActivity& t = tasks[0];
  EXPECT_EQ(t.kind, orTaskKindKernel);
  EXPECT_STREQ(t.name, "host work");
  EXPECT_EQ(t.stream, reinterpret_cast<std::uint64_t>(s));
  EXPECT_EQ(t.correlation, 7u);
  EXPECT_GE(t.endNs - t.startNs, 20'000'000);
  EXPECT_LE(t.launchNs, t.startNs);
  EXPECT_TRUE(t.failed);
  OR_OK(orStreamDestroy(s));
}

TEST(Activity, HostActivityEndingAfterItsRecordingIsDroppedNotHandedOn) {
  openreg::HostActivity late;
  ASSERT_TRUE(openreg::beginTaskActivity());
  late.begin(nullptr, "late");
  late.start();
  EXPECT_TRUE(openreg::endTaskActivity().empty());  // does not wait for it
  const auto next = record([&] { late.end(false); });
  EXPECT_TRUE(next.empty());
  EXPECT_FALSE(late.active());
}
