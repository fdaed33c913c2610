// The error model: failures reach every reader of what they left behind, and nothing else.
// See Note [Task errors] in runtime/src/Stream.cpp and Note [Poisoned memory] in Poison.h.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

// A kernel in the shape the PyTorch layer launches: it declares what it reads and writes.
struct Kernel {
  const float* in = nullptr;  // kernel-window address, or nullptr
  float* out = nullptr;       // kernel-window address
  std::size_t n = 0;
  bool fail = false;
  std::atomic<int>* ran = nullptr;
  void operator()() const {
    if (ran != nullptr) ran->fetch_add(1);
    if (fail) throw openreg::TaskError(7, "aten::index_select: index 9 is out of range");
    for (std::size_t i = 0; i < n; ++i) out[i] = (in != nullptr ? in[i] : 0.0f) + 1.0f;
  }
  void accesses(openreg::AccessList& list) const {
    if (in != nullptr)
      list.push_back({in, n * sizeof(float), /*read=*/true, /*write=*/false, /*cover=*/false});
    list.push_back({out, n * sizeof(float), /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

float* kernelPtr(void* devicePtr) {
  void* k = nullptr;
  EXPECT_EQ(orGetKernelPointer(&k, devicePtr), orSuccess);
  return static_cast<float*>(k);
}

constexpr std::size_t kN = 16;
constexpr const char* kOriginal = "aten::index_select: index 9 is out of range";

struct Buffers {
  void* a = nullptr;
  void* b = nullptr;
  Buffers() {
    EXPECT_EQ(orMalloc(&a, kN * sizeof(float)), orSuccess);
    EXPECT_EQ(orMalloc(&b, kN * sizeof(float)), orSuccess);
    EXPECT_EQ(orMemset(a, 0, kN * sizeof(float)), orSuccess);
  }
  ~Buffers() {
    orFree(a);
    orFree(b);
  }
};

bool readFails(void* devicePtr, const char* expected = kOriginal) {
  float host[kN];
  const orError_t e = orMemcpy(host, devicePtr, sizeof host, orMemcpyDeviceToHost);
  return e == orErrorLaunchFailure &&
         std::string(orGetLastErrorMessage()).find(expected) != std::string::npos;
}

}  // namespace

TEST(ErrorModel, AFailedTasksOutputFailsEveryReadNotJustTheFirstReport) {
  Buffers buf;
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);  // the stream's report...
  EXPECT_NE(lastMessage().find(kOriginal), std::string::npos) << lastMessage();
  EXPECT_EQ(openreg::lastErrorCategory(), 7);
  OR_OK(orDeviceSynchronize());   // ...ends the stream's error state,
  EXPECT_TRUE(readFails(buf.a));  // but the memory still holds no data, for every reader
  EXPECT_EQ(openreg::lastErrorCategory(), 7);
  EXPECT_TRUE(readFails(buf.a));
  OR_OK(orMemset(buf.b, 0, kN * sizeof(float)));  // unrelated memory reads fine
  float host[kN];
  OR_OK(orMemcpy(host, buf.b, sizeof host, orMemcpyDeviceToHost));
  OR_OK(orDeviceSynchronize());
}

TEST(ErrorModel, ATaskReadingPoisonDoesNotRunAndPassesTheFailureOn) {
  Buffers buf;
  std::atomic<int> ran{0};
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  OR_OK(openreg::launch(nullptr, Kernel{kernelPtr(buf.a), kernelPtr(buf.b), kN, false, &ran}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  EXPECT_EQ(ran.load(), 0);
  EXPECT_TRUE(readFails(buf.b));  // b was computed from a: the same, original failure
  OR_OK(orDeviceSynchronize());
}

TEST(ErrorModel, ACoveringWriteMakesMemoryDataAgain) {
  Buffers buf;
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN}));  // writes all of a
  float host[kN];
  OR_OK(orMemcpy(host, buf.a, sizeof host, orMemcpyDeviceToHost));
  EXPECT_EQ(host[3], 1.0f);
  // A host-to-device copy covers too.
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.b), kN, /*fail=*/true}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  OR_OK(orMemcpy(buf.b, host, sizeof host, orMemcpyHostToDevice));
  OR_OK(orMemcpy(host, buf.b, sizeof host, orMemcpyDeviceToHost));
  EXPECT_EQ(host[0], 1.0f);
}

TEST(ErrorModel, APartialWriteLeavesTheRestPoisoned) {
  Buffers buf;
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  float host[kN] = {};
  OR_OK(orMemcpy(buf.a, host, 4 * sizeof(float), orMemcpyHostToDevice));  // the first 4 only
  OR_OK(orMemcpy(host, buf.a, 4 * sizeof(float), orMemcpyDeviceToHost));
  EXPECT_EQ(orMemcpy(host, static_cast<float*>(buf.a) + 4, sizeof(float), orMemcpyDeviceToHost),
            orErrorLaunchFailure);
  EXPECT_TRUE(readFails(buf.a));
}

TEST(ErrorModel, AStreamWaitingOnAFailedStreamsEventTakesItsFailure) {
  Buffers buf;
  orStream_t side, other;
  orEvent_t event;
  OR_OK(orStreamCreate(&side));
  OR_OK(orStreamCreate(&other));
  OR_OK(orEventCreate(&event));
  Gate gate;
  OR_OK(launchGate(side, gate));  // the failure happens after the wait is queued
  OR_OK(openreg::launch(side, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  OR_OK(orEventRecord(event, side));
  OR_OK(orStreamWaitEvent(other, event, 0));
  gate.open();
  // The event carries the failure until it is reported: here, by the event itself.
  EXPECT_EQ(orEventSynchronize(event), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find(kOriginal), std::string::npos);
  // The reader on the waiting stream still gets the original failure (a copy of the poisoned
  // output): data computed from the failed task carries it whatever was reported.
  float host[kN];
  EXPECT_EQ(orMemcpyAsync(host, buf.a, sizeof host, orMemcpyDeviceToHost, other),
            orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find(kOriginal), std::string::npos) << lastMessage();
  // Reported once, the failure is over for the event, both streams and later waits.
  OR_OK(orEventQuery(event));
  OR_OK(orStreamWaitEvent(other, event, 0));  // already complete: nothing queued
  OR_OK(orStreamSynchronize(side));
  OR_OK(orStreamSynchronize(other));
  OR_OK(orEventDestroy(event));
  OR_OK(orStreamDestroy(side));
  OR_OK(orStreamDestroy(other));
}

TEST(ErrorModel, FreeingNeverReportsATaskFailure) {
  void* p = nullptr;
  void* q = nullptr;
  OR_OK(orMalloc(&p, 4096));
  OR_OK(orMalloc(&q, 4096));
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(q), kN, /*fail=*/true}));
  OR_OK(orFree(p));  // the failure is not this call's
  OR_OK(orFree(q));  // freeing clears the poison with the allocation
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);  // still pending for its reader
  void* r = nullptr;
  OR_OK(orMalloc(&r, 4096));  // the same range again: fresh memory, no poison
  float host[kN];
  OR_OK(orMemcpy(host, r, sizeof host, orMemcpyDeviceToHost));
  OR_OK(orFree(r));
}

// Thread A runs a failing kernel and reads its output while thread B synchronizes the device (and
// takes the stream's report): A must get the failure every time, never the memory's bytes.
TEST(ErrorModel, AReaderGetsTheFailureWhateverAnotherThreadSynchronizes) {
  Buffers buf;
  std::atomic<bool> stop{false};
  std::thread syncer([&] {
    while (!stop.load()) orDeviceSynchronize();
  });
  int silent = 0;
  for (int i = 0; i < 200; ++i) {
    openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true});
    if (!readFails(buf.a)) ++silent;
  }
  stop.store(true);
  syncer.join();
  EXPECT_EQ(silent, 0);
  orDeviceSynchronize();
}

TEST(ErrorModel, HostReadsOfPoisonedMemoryAreRefused) {
  Buffers buf;
  OR_OK(openreg::launch(nullptr, Kernel{nullptr, kernelPtr(buf.a), kN, /*fail=*/true}));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  const openreg::AccessList read = {{buf.a, 8, /*read=*/true, /*write=*/false, /*cover=*/false}};
  EXPECT_EQ(openreg::checkHostAccesses(read), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find(kOriginal), std::string::npos);
  const openreg::AccessList cover = {{buf.a, kN * sizeof(float), false, true, true}};
  OR_OK(openreg::checkHostAccesses(cover));  // the host then writes all of it
  OR_OK(openreg::checkHostAccesses(read));
}

// Note [Bounded queues]: a host launching behind a stalled stream waits once the queue is full.
TEST(ErrorModel, AFullQueueMakesTheHostWait) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_QUEUE_DEPTH", "32", 1);
        Gate gate;
        launchGate(nullptr, gate);
        gate.waitEntered();
        std::atomic<int> launched{0};
        std::thread host([&] {
          for (int i = 0; i < 1000; ++i) {
            openreg::launch(nullptr, [] {});
            launched.fetch_add(1);
          }
        });
        sleepMs(100);
        const int whileStalled = launched.load();
        gate.open();
        host.join();
        const bool drained = orDeviceSynchronize() == orSuccess;
        std::exit(
            whileStalled >= 30 && whileStalled <= 32 && launched.load() == 1000 && drained ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// An event record is published only once it is queued: while a full queue holds back
// orEventRecord, waits and queries see the event's previous record (here: none), never one that
// has no place in a stream yet (the fuzzer found a deadlock that way).
TEST(ErrorModel, ARecordHeldBackByAFullQueueIsNotVisibleYet) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_QUEUE_DEPTH", "8", 1);
        orStream_t other;
        orEvent_t event;
        orStreamCreate(&other);
        orEventCreate(&event);
        Gate gate;
        launchGate(nullptr, gate);
        gate.waitEntered();
        for (int i = 0; i < 7; ++i) openreg::launch(nullptr, [] {});
        std::thread recorder([&] { orEventRecord(event, nullptr); });  // waits for queue space
        sleepMs(50);
        const bool unseen =
            orEventQuery(event) == orSuccess && orStreamWaitEvent(other, event, 0) == orSuccess;
        gate.open();
        recorder.join();
        const bool done =
            orEventSynchronize(event) == orSuccess && orStreamSynchronize(other) == orSuccess;
        std::exit(unseen && done ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Note [Bounded queues]: host threads launching on one stream while its worker completes their
// work must never compute a queue length from a stale count (a wrapped difference made one wait
// without end; found by the fuzzer).
TEST(ErrorModel, ThreadsLaunchingOnOneStreamNeverWaitForAQueueThatIsNotFull) {
  EXPECT_EXIT(
      {
        alarm(60);  // a wait without end fails the test instead of hanging it
        std::atomic<int> ran{0};
        std::vector<std::thread> hosts;
        for (int t = 0; t < 4; ++t) {
          hosts.emplace_back([&ran] {
            for (int i = 0; i < 50000; ++i) openreg::launch(nullptr, [&ran] { ran.fetch_add(1); });
          });
        }
        for (std::thread& h : hosts) h.join();
        orDeviceSynchronize();
        std::exit(ran.load() == 200000 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
