// Events: record, query, synchronize, cross-stream and cross-device waits, timing, re-recording.
#include <cstdlib>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

TEST(Event, UnrecordedEventIsComplete) {
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  OR_OK(orEventQuery(e));
  OR_OK(orEventSynchronize(e));
  OR_OK(orStreamWaitEvent(nullptr, e, 0));  // no-op
  OR_OK(orEventDestroy(e));
}

TEST(Event, QueryAndSynchronizeFollowTheRecordedWork) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  Gate gate;
  OR_OK(launchGate(s, gate));
  OR_OK(orEventRecord(e, s));
  EXPECT_EQ(orEventQuery(e), orErrorNotReady);
  gate.open();
  OR_OK(orEventSynchronize(e));
  OR_OK(orEventQuery(e));
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}

TEST(Event, StreamWaitOrdersWorkAcrossStreams) {
  orStream_t producer, consumer;
  OR_OK(orStreamCreate(&producer));
  OR_OK(orStreamCreate(&consumer));
  orEvent_t e;
  OR_OK(orEventCreateWithFlags(&e, orEventDisableTiming));
  Gate gate;
  int value = 0, seen = -1;
  OR_OK(launchGate(producer, gate));
  OR_OK(openreg::launch(producer, [&value] { value = 42; }));
  OR_OK(orEventRecord(e, producer));
  OR_OK(orStreamWaitEvent(consumer, e, 0));
  OR_OK(openreg::launch(consumer, [&] { seen = value; }));
  sleepMs(10);
  EXPECT_EQ(orStreamQuery(consumer), orErrorNotReady);  // parked on the event
  gate.open();
  OR_OK(orStreamSynchronize(consumer));
  EXPECT_EQ(seen, 42);
  EXPECT_EQ(orStreamWaitEvent(consumer, e, 1), orErrorInvalidValue);
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(producer));
  OR_OK(orStreamDestroy(consumer));
}

TEST(Event, StreamWaitWorksAcrossDevices) {
  OR_OK(orSetDevice(1));
  orStream_t s1;
  orEvent_t e1;
  OR_OK(orStreamCreate(&s1));
  OR_OK(orEventCreate(&e1));
  OR_OK(orSetDevice(0));
  Gate gate;
  int value = 0, seen = -1;
  OR_OK(launchGate(s1, gate));
  OR_OK(openreg::launch(s1, [&value] { value = 7; }));
  OR_OK(orEventRecord(e1, s1));
  OR_OK(orStreamWaitEvent(nullptr, e1, 0));  // device 0's default stream waits on device 1
  OR_OK(openreg::launch(nullptr, [&] { seen = value; }));
  gate.open();
  OR_OK(orStreamSynchronize(nullptr));
  EXPECT_EQ(seen, 7);
  OR_OK(orEventDestroy(e1));
  OR_OK(orStreamDestroy(s1));
}

TEST(Event, RecordNeedsAStreamOfTheEventsDevice) {
  orEvent_t e0;
  OR_OK(orEventCreate(&e0));
  orStream_t d1;
  OR_OK(orDeviceGetDefaultStream(1, &d1));
  EXPECT_EQ(orEventRecord(e0, d1), orErrorInvalidResourceHandle);
  EXPECT_NE(lastMessage().find("event belongs to device 0 but the stream to device 1"),
            std::string::npos);
  OR_OK(orEventDestroy(e0));
}

TEST(Event, ElapsedTimeComesFromTheWorkersClock) {
  orEvent_t start, end;
  OR_OK(orEventCreate(&start));
  OR_OK(orEventCreate(&end));
  OR_OK(orEventRecord(start, nullptr));
  OR_OK(openreg::launch(nullptr, [] { sleepMs(30); }));
  OR_OK(orEventRecord(end, nullptr));
  OR_OK(orEventSynchronize(end));
  float ms = 0;
  OR_OK(orEventElapsedTime(&ms, start, end));
  EXPECT_GE(ms, 29.0f);
  EXPECT_LT(ms, 2000.0f);
  OR_OK(orEventDestroy(start));
  OR_OK(orEventDestroy(end));
}

TEST(Event, ElapsedTimeErrors) {
  orEvent_t a, b, untimed, never;
  OR_OK(orEventCreate(&a));
  OR_OK(orEventCreate(&b));
  OR_OK(orEventCreateWithFlags(&untimed, orEventDisableTiming));
  OR_OK(orEventCreate(&never));
  float ms = 0;
  Gate gate;
  OR_OK(orEventRecord(a, nullptr));
  OR_OK(launchGate(nullptr, gate));
  OR_OK(orEventRecord(b, nullptr));
  OR_OK(orEventRecord(untimed, nullptr));
  EXPECT_EQ(orEventElapsedTime(&ms, a, b), orErrorNotReady);
  gate.open();
  OR_OK(orEventSynchronize(b));
  OR_OK(orEventElapsedTime(&ms, a, b));
  EXPECT_EQ(orEventElapsedTime(&ms, a, untimed), orErrorInvalidResourceHandle);
  EXPECT_EQ(orEventElapsedTime(&ms, a, never), orErrorInvalidResourceHandle);
  EXPECT_EQ(orEventElapsedTime(nullptr, a, b), orErrorInvalidValue);
  OR_OK(orSetDevice(1));
  orEvent_t other;
  OR_OK(orEventCreate(&other));
  OR_OK(orEventRecord(other, nullptr));
  OR_OK(orEventSynchronize(other));
  OR_OK(orSetDevice(0));
  EXPECT_EQ(orEventElapsedTime(&ms, a, other), orErrorInvalidResourceHandle);
  for (orEvent_t e : {a, b, untimed, never, other}) OR_OK(orEventDestroy(e));
  orEvent_t bad;
  EXPECT_EQ(orEventCreateWithFlags(&bad, 0x80), orErrorInvalidValue);
}

TEST(Event, DestroyedHandlesAreRejectedButPendingRecordsStillComplete) {
  orStream_t producer, consumer;
  OR_OK(orStreamCreate(&producer));
  OR_OK(orStreamCreate(&consumer));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  Gate gate;
  bool after = false;
  OR_OK(launchGate(producer, gate));
  OR_OK(orEventRecord(e, producer));
  OR_OK(orStreamWaitEvent(consumer, e, 0));
  OR_OK(openreg::launch(consumer, [&after] { after = true; }));
  OR_OK(orEventDestroy(e));
  EXPECT_EQ(orEventQuery(e), orErrorInvalidResourceHandle);
  EXPECT_EQ(orEventRecord(e, nullptr), orErrorInvalidResourceHandle);
  EXPECT_EQ(orEventDestroy(e), orErrorInvalidResourceHandle);
  EXPECT_EQ(orStreamWaitEvent(consumer, e, 0), orErrorInvalidResourceHandle);
  gate.open();
  OR_OK(orStreamSynchronize(consumer));  // the wait on the destroyed event's record resolved
  EXPECT_TRUE(after);
  OR_OK(orStreamDestroy(producer));
  OR_OK(orStreamDestroy(consumer));
}

// See Note [Event records]: a wait refers to the record current when it was issued.
TEST(Event, ReRecordingBeforeCompletionKeepsEarlierWaitsOnTheEarlierRecord) {
  orStream_t slow, fast, waiter;
  OR_OK(orStreamCreate(&slow));
  OR_OK(orStreamCreate(&fast));
  OR_OK(orStreamCreate(&waiter));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  Gate gate;
  std::atomic<bool> waiterRan{false};
  OR_OK(launchGate(slow, gate));
  OR_OK(orEventRecord(e, slow));           // record 1: held back by the gate
  OR_OK(orStreamWaitEvent(waiter, e, 0));  // waits for record 1
  OR_OK(openreg::launch(waiter, [&waiterRan] { waiterRan.store(true); }));
  OR_OK(orEventRecord(e, fast));  // record 2: completes at once
  OR_OK(orStreamSynchronize(fast));
  OR_OK(orEventQuery(e));  // queries see the most recent record
  sleepMs(10);
  EXPECT_FALSE(waiterRan.load());  // but the waiter still waits for record 1
  gate.open();
  OR_OK(orStreamSynchronize(waiter));
  EXPECT_TRUE(waiterRan.load());
  OR_OK(orEventDestroy(e));
  for (orStream_t s : {slow, fast, waiter}) OR_OK(orStreamDestroy(s));
}

TEST(Event, ChainedWaitsDoNotDeadlockWithOneWorker) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_STREAM_WORKERS", "1", 1);
        constexpr int kStreams = 8;
        orStream_t streams[kStreams];
        orEvent_t events[kStreams];
        for (int i = 0; i < kStreams; ++i) {
          orStreamCreate(&streams[i]);
          orEventCreateWithFlags(&events[i], orEventDisableTiming);
        }
        std::vector<int> order;
        // Stream i waits for stream i+1; the gate holds the last stream back, so the single
        // worker reaches the waits before the work they wait for and must park, not block.
        Gate gate;
        launchGate(streams[kStreams - 1], gate);
        for (int i = kStreams - 1; i >= 0; --i) {
          if (i + 1 < kStreams) orStreamWaitEvent(streams[i], events[i + 1], 0);
          openreg::launch(streams[i], [&order, i] { order.push_back(i); });
          orEventRecord(events[i], streams[i]);
        }
        gate.open();
        bool good = orDeviceSynchronize() == orSuccess && order.size() == kStreams;
        for (int i = 0; good && i < kStreams; ++i) good = order[i] == kStreams - 1 - i;
        std::exit(good ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// See Note [Event records]: an event recorded last on a stream completes exactly when the stream
// becomes idle, whichever of the two an observer looks at first.
TEST(Event, CompletionAgreesWithTheStreamAtEveryInstant) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreateWithFlags(&e, orEventDisableTiming));
  for (int i = 0; i < 2000; ++i) {
    OR_OK(openreg::launch(s, [] {}));
    OR_OK(orEventRecord(e, s));
    if (i % 2 == 0) {
      while (orEventQuery(e) == orErrorNotReady) {
      }
      ASSERT_EQ(orStreamQuery(s), orSuccess) << "iteration " << i;
    } else {
      while (orStreamQuery(s) == orErrorNotReady) {
      }
      ASSERT_EQ(orEventQuery(e), orSuccess) << "iteration " << i;
    }
  }
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}
