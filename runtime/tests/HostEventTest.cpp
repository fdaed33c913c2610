// Host-completed event records (Note [Host-completed records]): ordering, failure propagation,
// misuse, and that a stream waiting on one holds no worker.
#include <atomic>
#include <cstdlib>
#include <thread>

#include "TestUtil.h"

using namespace openreg_test;

TEST(HostEvent, StreamWorkWaitsForTheHostToComplete) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventRecordHost(e));
  EXPECT_EQ(orEventQuery(e), orErrorNotReady);
  OR_OK(orStreamWaitEvent(s, e, 0));
  std::atomic<bool> ran{false};
  OR_OK(openreg::launch(s, [&ran] { ran.store(true); }));
  sleepMs(30);
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(orStreamQuery(s), orErrorNotReady);
  std::thread completer([e] { EXPECT_TRUE(ok(orEventCompleteHost(e, nullptr))); });
  completer.join();
  OR_OK(orStreamSynchronize(s));
  EXPECT_TRUE(ran.load());
  OR_OK(orEventQuery(e));
  OR_OK(orEventSynchronize(e));
  // Re-arming after completion starts a new pending record; waits issued before keep the old one.
  OR_OK(orEventRecordHost(e));
  EXPECT_EQ(orEventQuery(e), orErrorNotReady);
  OR_OK(orEventCompleteHost(e, nullptr));
  OR_OK(orEventQuery(e));
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}

TEST(HostEvent, HostSynchronizeWaitsForTheHostThread) {
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventRecordHost(e));
  std::atomic<bool> completed{false};
  std::thread completer([&] {
    sleepMs(20);
    completed.store(true);
    EXPECT_TRUE(ok(orEventCompleteHost(e, nullptr)));
  });
  OR_OK(orEventSynchronize(e));
  EXPECT_TRUE(completed.load());
  completer.join();
  OR_OK(orEventDestroy(e));
}

TEST(HostEvent, AFailureReachesTheWaitingStreamAndTheEvent) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventRecordHost(e));
  OR_OK(orStreamWaitEvent(s, e, 0));
  std::atomic<bool> ran{false};
  OR_OK(openreg::launch(s, [&ran] { ran.store(true); }));
  OR_OK(orEventCompleteHost(e, "collective X failed on rank 1"));
  EXPECT_EQ(orStreamSynchronize(s), orErrorLaunchFailure);
  EXPECT_EQ(lastMessage(), "collective X failed on rank 1");
  EXPECT_TRUE(ran.load());        // independent work still runs (Note [Task errors])
  OR_OK(orStreamSynchronize(s));  // the report ended the stream's error state
  // ...and the event's: a failure reported once is over everywhere but in poisoned memory
  // (Note [Task errors] in Stream.cpp).
  OR_OK(orEventQuery(e));
  OR_OK(orEventSynchronize(e));
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}

TEST(HostEvent, AFailureNotReportedYetIsCarriedByTheEventUntilItsReport) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventRecordHost(e));
  OR_OK(orStreamWaitEvent(s, e, 0));
  OR_OK(orEventCompleteHost(e, "collective X failed on rank 1"));
  EXPECT_EQ(orEventQuery(e), orErrorLaunchFailure);  // the first report...
  EXPECT_EQ(lastMessage(), "collective X failed on rank 1");
  OR_OK(orEventSynchronize(e));   // ...ends it for the event
  OR_OK(orStreamSynchronize(s));  // and for the stream that took it from the event
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}

TEST(HostEvent, MisuseIsRejected) {
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  EXPECT_EQ(orEventCompleteHost(e, nullptr), orErrorNotPermitted);
  EXPECT_NE(lastMessage().find("orEventRecordHost"), std::string::npos);
  OR_OK(orEventRecordHost(e));
  EXPECT_EQ(orEventRecordHost(e), orErrorNotPermitted);
  EXPECT_NE(lastMessage().find("still pending"), std::string::npos);
  OR_OK(orEventCompleteHost(e, nullptr));
  EXPECT_EQ(orEventCompleteHost(e, nullptr), orErrorNotPermitted);
  OR_OK(orEventDestroy(e));
  EXPECT_EQ(orEventRecordHost(e), orErrorInvalidResourceHandle);
  EXPECT_EQ(orEventCompleteHost(e, nullptr), orErrorInvalidResourceHandle);
}

TEST(HostEvent, DestroyingAPendingEventFailsItsWaiters) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventRecordHost(e));
  OR_OK(orStreamWaitEvent(s, e, 0));
  OR_OK(orEventDestroy(e));
  EXPECT_EQ(orStreamSynchronize(s), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("destroyed before the host completed"), std::string::npos);
  OR_OK(orStreamDestroy(s));
}

// The point of the design: with one worker, a stream parked on a host record must leave the
// worker to the device's other streams, including the one whose work the host is waiting for.
TEST(HostEvent, AWaitingStreamHoldsNoWorker) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_STREAM_WORKERS", "1", 1);
        orStream_t waiting;
        orStream_t other;
        orStreamCreate(&waiting);
        orStreamCreate(&other);
        orEvent_t host;
        orEvent_t produced;
        orEventCreate(&host);
        orEventCreateWithFlags(&produced, orEventDisableTiming);
        orEventRecordHost(host);
        orStreamWaitEvent(waiting, host, 0);
        std::atomic<int> after{0};
        openreg::launch(waiting, [&after] { after.store(1); });
        // The host's work needs the other stream's work first, as a collective needs its inputs.
        std::atomic<bool> input{false};
        openreg::launch(other, [&input] { input.store(true); });
        orEventRecord(produced, other);
        std::thread hostWork([&] {
          orEventSynchronize(produced);
          orEventCompleteHost(host, nullptr);
        });
        hostWork.join();
        const bool good = orDeviceSynchronize() == orSuccess && input.load() && after.load() == 1;
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
