// Where the error state ends (Note [Task errors] in runtime/src/Stream.cpp, docs/errors.md): once
// a failure has been reported to the program, by any call, only the memory it poisoned carries
// it; streams, event records (earlier or later ones), other streams and other devices are clear.
#include <chrono>
#include <thread>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

constexpr std::size_t kN = 16;
constexpr const char* kOriginal = "aten::index_select: index 9 is out of range";

// Writes `n` floats at `out` (a kernel-window address), or fails having declared them written.
struct Kernel {
  float* out = nullptr;
  std::size_t n = 0;
  bool fail = false;
  void operator()() const {
    if (fail) throw openreg::TaskError(7, kOriginal);
    for (std::size_t i = 0; i < n; ++i) out[i] = 2.0f;
  }
  void accesses(openreg::AccessList& list) const {
    list.push_back({out, n * sizeof(float), /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

float* kernelPtr(void* devicePtr) {
  void* k = nullptr;
  EXPECT_EQ(orGetKernelPointer(&k, devicePtr), orSuccess);
  return static_cast<float*>(k);
}

bool readFails(void* devicePtr) {
  float host[kN];
  return orMemcpy(host, devicePtr, sizeof host, orMemcpyDeviceToHost) == orErrorLaunchFailure &&
         lastMessage().find(kOriginal) != std::string::npos;
}

// Fails a kernel writing `poisoned` on `stream`; the stream holds the failure unreported.
void failOn(orStream_t stream, void* poisoned) {
  ASSERT_TRUE(ok(openreg::launch(stream, Kernel{kernelPtr(poisoned), kN, /*fail=*/true})));
}

}  // namespace

// The allocator's case (issue 24): an event recorded while the failure was pending must not raise
// it for ever after the stream reported it.
TEST(ErrorState, AReportEndsTheFailureInEventsRecordedBeforeIt) {
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  orStream_t side;
  orEvent_t before;
  OR_OK(orStreamCreate(&side));
  OR_OK(orEventCreate(&before));
  failOn(side, a);
  OR_OK(orEventRecord(before, side));  // carries the pending failure
  EXPECT_EQ(orStreamSynchronize(side), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find(kOriginal), std::string::npos);
  for (int i = 0; i < 3; ++i) {
    OR_EXPECT_OK(orEventQuery(before));
    OR_EXPECT_OK(orEventSynchronize(before));
  }
  orStream_t waiter;
  OR_OK(orStreamCreate(&waiter));
  OR_OK(orStreamWaitEvent(waiter, before, 0));
  OR_EXPECT_OK(orStreamSynchronize(waiter));
  OR_EXPECT_OK(orDeviceSynchronize());
  EXPECT_TRUE(readFails(a));  // the data still carries it
  EXPECT_TRUE(readFails(a));
  OR_OK(orStreamDestroy(waiter));
  OR_OK(orEventDestroy(before));
  OR_OK(orStreamDestroy(side));
  OR_OK(orFree(a));
}

// Reported through an event, the failure is over for its stream too, and for a stream that took
// it from the event before the report.
TEST(ErrorState, AReportThroughAnEventEndsItOnEveryStream) {
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  orStream_t side, waiter;
  orEvent_t event;
  OR_OK(orStreamCreate(&side));
  OR_OK(orStreamCreate(&waiter));
  OR_OK(orEventCreate(&event));
  failOn(side, a);
  OR_OK(orEventRecord(event, side));
  OR_OK(orStreamWaitEvent(waiter, event, 0));
  OR_OK(openreg::launch(waiter, [] {}));
  Gate gate;  // the waiter has taken the failure before anyone reports it
  OR_OK(launchGate(waiter, gate));
  gate.waitEntered();
  gate.open();
  EXPECT_EQ(orEventSynchronize(event), orErrorLaunchFailure);
  OR_EXPECT_OK(orEventSynchronize(event));
  OR_EXPECT_OK(orStreamSynchronize(side));
  OR_EXPECT_OK(orStreamSynchronize(waiter));
  OR_EXPECT_OK(orDeviceSynchronize());
  EXPECT_TRUE(readFails(a));
  OR_OK(orEventDestroy(event));
  OR_OK(orStreamDestroy(waiter));
  OR_OK(orStreamDestroy(side));
  OR_OK(orFree(a));
}

// A read of the poisoned memory is a report: the next synchronization has nothing left to say.
TEST(ErrorState, AReadOfThePoisonReportsIt) {
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  failOn(nullptr, a);
  EXPECT_TRUE(readFails(a));
  OR_EXPECT_OK(orDeviceSynchronize());
  EXPECT_TRUE(readFails(a));
  OR_OK(orFree(a));
}

// orMemReuse: a caching allocator gives part of an allocation to a new owner after the failure
// was reported; that part carries no poison, the rest still does.
TEST(ErrorState, ReusedMemoryCarriesNoPoison) {
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  failOn(nullptr, a);
  EXPECT_EQ(orStreamSynchronize(nullptr), orErrorLaunchFailure);
  float* half = static_cast<float*>(a) + kN / 2;
  OR_EXPECT_OK(orMemReuse(half, kN / 2 * sizeof(float), nullptr));
  float host[kN / 2];
  OR_EXPECT_OK(orMemcpy(host, half, sizeof host, orMemcpyDeviceToHost));
  EXPECT_TRUE(readFails(a));  // the first half is still the failed task's data
  EXPECT_EQ(orMemReuse(a, std::size_t{1} << 40, nullptr), orErrorInvalidDevicePointer);
  OR_OK(orFree(a));
}

// orMemReuse is stream-ordered: a reader of the old owner's bytes queued before the reuse still
// sees their failure (cleared at once, its copy read the failed bytes as data).
TEST(ErrorState, ReuseLeavesTheOldOwnersQueuedReadersTheFailure) {
  void* a = nullptr;
  void* b = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  OR_OK(orMalloc(&b, kN * sizeof(float)));
  failOn(nullptr, a);
  EXPECT_EQ(orStreamSynchronize(nullptr), orErrorLaunchFailure);  // reported: a stays poisoned
  OR_OK(
      openreg::launch(nullptr, [] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }));
  OR_OK(orMemcpyAsync(b, a, kN * sizeof(float), orMemcpyDeviceToDevice, nullptr));
  OR_OK(orMemReuse(a, kN * sizeof(float), nullptr));  // while the copy still waits
  OR_EXPECT_OK(orStreamSynchronize(nullptr));  // the failure was reported: it is not again...
  EXPECT_TRUE(readFails(b));                   // ...but the copy read the poison, and carried it
  EXPECT_FALSE(readFails(a));                  // the new owner's bytes
  OR_OK(orFree(a));
  OR_OK(orFree(b));
}

// orEventDisableFailure: an event that only orders work (the allocator's frees, the generator's
// uses) never carries a failure, and takes nothing from the stream: the stream still reports it,
// once.
TEST(ErrorState, AnOrderingEventCarriesNoFailureAndTakesNoneAway) {
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  orStream_t side, other;
  orEvent_t order;
  OR_OK(orStreamCreate(&side));
  OR_OK(orStreamCreate(&other));
  OR_OK(orEventCreateWithFlags(&order, orEventDisableTiming | orEventDisableFailure));
  failOn(side, a);
  OR_OK(orEventRecord(order, side));
  OR_EXPECT_OK(orEventSynchronize(order));
  OR_EXPECT_OK(orEventQuery(order));
  OR_OK(orStreamWaitEvent(other, order, 0));
  OR_EXPECT_OK(orStreamSynchronize(other));  // the failure did not travel with the ordering
  EXPECT_EQ(orStreamSynchronize(side), orErrorLaunchFailure);  // not lost either
  OR_EXPECT_OK(orStreamSynchronize(side));
  OR_OK(orEventDestroy(order));
  OR_OK(orStreamDestroy(other));
  OR_OK(orStreamDestroy(side));
  OR_OK(orFree(a));
}

// After the report, events recorded afterwards, new work on the failed stream, other devices and
// freed-then-reused memory all behave as if nothing had happened.
TEST(ErrorState, AfterTheReportTheDeviceAndItsNeighboursWork) {
  int count = 0;
  OR_OK(orGetDeviceCount(&count));
  void* a = nullptr;
  OR_OK(orMalloc(&a, kN * sizeof(float)));
  failOn(nullptr, a);
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  orEvent_t after;
  OR_OK(orEventCreate(&after));
  OR_OK(orEventRecord(after, nullptr));
  OR_EXPECT_OK(orEventSynchronize(after));
  OR_OK(orFree(a));  // frees clear the poison: the range is fresh memory again
  void* b = nullptr;
  OR_OK(orMalloc(&b, kN * sizeof(float)));
  OR_OK(openreg::launch(nullptr, Kernel{kernelPtr(b), kN}));
  float host[kN] = {};
  OR_OK(orMemcpy(host, b, sizeof host, orMemcpyDeviceToHost));
  EXPECT_EQ(host[kN - 1], 2.0f);
  if (count > 1) {
    OR_OK(orSetDevice(1));
    void* c = nullptr;
    OR_OK(orMalloc(&c, kN * sizeof(float)));
    OR_OK(openreg::launch(nullptr, Kernel{kernelPtr(c), kN}));
    OR_OK(orMemcpy(host, c, sizeof host, orMemcpyDeviceToHost));
    EXPECT_EQ(host[0], 2.0f);
    OR_EXPECT_OK(orDeviceSynchronize());
    OR_OK(orFree(c));
    OR_OK(orSetDevice(0));
  }
  OR_OK(orEventDestroy(after));
  OR_OK(orFree(b));
}
