// Streams: asynchronous in-order execution, handles, priorities, errors, launch modes, Task.
#include <array>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

TEST(Stream, LaunchReturnsBeforeTheTaskRuns) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  Gate gate;
  std::atomic<bool> ran{false};
  OR_OK(launchGate(s, gate));
  OR_OK(openreg::launch(s, [&ran] { ran.store(true); }));
  gate.waitEntered();
  EXPECT_EQ(orStreamQuery(s), orErrorNotReady);  // a dequeued, running task is still pending
  EXPECT_FALSE(ran.load());
  gate.open();
  OR_OK(orStreamSynchronize(s));
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(orStreamQuery(s), orSuccess);
  OR_OK(orStreamDestroy(s));
}

uint64_t synchronizations() {
  uint64_t count = 0;
  EXPECT_EQ(orGetSynchronizationCount(&count), orSuccess);
  return count;
}

// Launches are not synchronizations; each wait of the host is one, whatever it waits for.
TEST(Stream, EveryHostWaitIsCountedAndNoLaunch) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t e;
  OR_OK(orEventCreate(&e));
  uint64_t before = synchronizations();
  for (int i = 0; i < 100; ++i) OR_OK(openreg::launch(s, [] {}));
  OR_OK(orEventRecord(e, s));
  EXPECT_EQ(synchronizations() - before, 0u);
  OR_OK(orStreamSynchronize(s));
  EXPECT_EQ(synchronizations() - before, 1u);
  OR_OK(orEventSynchronize(e));
  EXPECT_EQ(synchronizations() - before, 2u);
  OR_OK(openreg::launchAndWait(s, [] {}));
  EXPECT_EQ(synchronizations() - before, 3u);
  before = synchronizations();
  OR_OK(orDeviceSynchronize());
  EXPECT_GE(synchronizations() - before, 2u);  // one per live stream: the default one and s
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(s));
}

TEST(Stream, TasksRunInLaunchOrder) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::vector<int> order;
  for (int i = 0; i < 20000; ++i) OR_OK(openreg::launch(s, [&order, i] { order.push_back(i); }));
  OR_OK(orStreamSynchronize(s));
  ASSERT_EQ(order.size(), 20000u);
  for (int i = 0; i < 20000; ++i) ASSERT_EQ(order[i], i);
  OR_OK(orStreamDestroy(s));
}

TEST(Stream, LaunchHostFuncRunsTheFunction) {
  int counter = 0;
  auto bump = [](void* arg) { ++*static_cast<int*>(arg); };
  for (int i = 0; i < 3; ++i) OR_OK(orLaunchHostFunc(nullptr, bump, &counter));
  OR_OK(orStreamSynchronize(nullptr));
  EXPECT_EQ(counter, 3);
  EXPECT_EQ(orLaunchHostFunc(nullptr, nullptr, &counter), orErrorInvalidValue);
}

TEST(Stream, StreamsOfOneDeviceRunConcurrentlyWithTwoWorkers) {
  orDeviceProp prop;
  OR_OK(orGetDeviceProperties(&prop, 0));
  if (prop.workerCount < 2) GTEST_SKIP() << "needs OPENREG_STREAM_WORKERS >= 2";
  orStream_t a, b;
  OR_OK(orStreamCreate(&a));
  OR_OK(orStreamCreate(&b));
  Gate gate;
  std::atomic<bool> ran{false};
  OR_OK(launchGate(a, gate));
  OR_OK(openreg::launch(b, [&ran] { ran.store(true); }));
  OR_OK(orStreamSynchronize(b));  // b is not held up by a's blocked task
  EXPECT_TRUE(ran.load());
  EXPECT_EQ(orStreamQuery(a), orErrorNotReady);
  gate.open();
  OR_OK(orStreamSynchronize(a));
  OR_OK(orStreamDestroy(a));
  OR_OK(orStreamDestroy(b));
}

TEST(Stream, HandlesAreValidated) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  OR_OK(orStreamDestroy(s));
  EXPECT_EQ(orStreamQuery(s), orErrorInvalidResourceHandle);
  EXPECT_NE(lastMessage().find("not live"), std::string::npos);
  EXPECT_EQ(orStreamSynchronize(s), orErrorInvalidResourceHandle);
  EXPECT_EQ(orStreamDestroy(s), orErrorInvalidResourceHandle);
  EXPECT_EQ(orLaunchHostFunc(
                s, [](void*) {}, nullptr),
            orErrorInvalidResourceHandle);
  EXPECT_EQ(openreg::launch(s, [] {}), orErrorInvalidResourceHandle);
  int priority = 0;
  EXPECT_EQ(orStreamGetPriority(s, &priority), orErrorInvalidResourceHandle);
  // A handle that was never issued.
  const auto bogus = reinterpret_cast<orStream_t>(0xdeadbeefcafeULL);
  EXPECT_EQ(orStreamQuery(bogus), orErrorInvalidResourceHandle);
  EXPECT_EQ(orStreamQuery(reinterpret_cast<orStream_t>(0x12345)), orErrorInvalidResourceHandle);
}

TEST(Stream, StaleHandleIsRejectedAfterItsSlotIsReused) {
  orStream_t first, second;
  OR_OK(orStreamCreate(&first));
  OR_OK(orStreamDestroy(first));
  OR_OK(orStreamCreate(&second));  // reuses the slot with a new generation
  EXPECT_NE(first, second);
  EXPECT_EQ(orStreamQuery(first), orErrorInvalidResourceHandle);
  OR_OK(orStreamQuery(second));
  OR_OK(orStreamDestroy(second));
}

TEST(Stream, DefaultStreamsCannotBeDestroyedAndAreAddressable) {
  EXPECT_EQ(orStreamDestroy(nullptr), orErrorNotPermitted);
  orStream_t d1;
  OR_OK(orDeviceGetDefaultStream(1, &d1));
  EXPECT_EQ(orStreamDestroy(d1), orErrorNotPermitted);
  int device = -1;
  OR_OK(orStreamGetDevice(d1, &device));
  EXPECT_EQ(device, 1);
  // While device 1 is current, the NULL stream is device 1's default stream.
  OR_OK(orSetDevice(1));
  Gate gate;
  OR_OK(launchGate(nullptr, gate));
  gate.waitEntered();
  EXPECT_EQ(orStreamQuery(d1), orErrorNotReady);
  gate.open();
  OR_OK(orStreamSynchronize(d1));
  OR_OK(orStreamGetDevice(nullptr, &device));
  EXPECT_EQ(device, 1);
  OR_OK(orSetDevice(0));
}

TEST(Stream, DestroyingAStreamLetsQueuedWorkFinish) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  Gate gate;
  std::atomic<bool> ran{false};
  OR_OK(launchGate(s, gate));
  OR_OK(openreg::launch(s, [&ran] { ran.store(true); }));
  OR_OK(orStreamDestroy(s));
  gate.open();
  OR_OK(orDeviceSynchronize());  // still covers the destroyed stream's work
  EXPECT_TRUE(ran.load());
}

TEST(Stream, PriorityIsClampedAndReported) {
  orStream_t high, low;
  OR_OK(orStreamCreateWithPriority(&high, 0, -5));
  OR_OK(orStreamCreateWithPriority(&low, 0, 7));
  int p = 99;
  OR_OK(orStreamGetPriority(high, &p));
  EXPECT_EQ(p, -1);
  OR_OK(orStreamGetPriority(low, &p));
  EXPECT_EQ(p, 0);
  orStream_t bad;
  EXPECT_EQ(orStreamCreateWithPriority(&bad, 3, 0), orErrorInvalidValue);
  OR_OK(orStreamDestroy(high));
  OR_OK(orStreamDestroy(low));
}

namespace {
// Runs in a child with one worker: returns the order in which a low- and a high-priority stream,
// both made ready while the worker was busy, were served.
std::vector<char> servedOrderWithOneWorker() {
  setenv("OPENREG_STREAM_WORKERS", "1", 1);
  orStream_t gateStream;
  orStream_t low;
  orStream_t high;
  orStreamCreate(&gateStream);
  orStreamCreateWithPriority(&low, 0, 0);
  orStreamCreateWithPriority(&high, 0, -1);
  Gate gate;
  launchGate(gateStream, gate);
  gate.waitEntered();  // the only worker is busy
  std::mutex m;
  std::vector<char> order;
  auto log = [&](char c) {
    return [&m, &order, c] {
      std::lock_guard<std::mutex> l(m);
      order.push_back(c);
    };
  };
  openreg::launch(low, log('L'));
  openreg::launch(high, log('H'));
  gate.open();
  orDeviceSynchronize();
  return order;
}
}  // namespace

TEST(Stream, HighPriorityStreamsAreServedFirst) {
  EXPECT_EXIT(std::exit(servedOrderWithOneWorker() == std::vector<char>({'H', 'L'}) ? 0 : 1),
              ::testing::ExitedWithCode(0), "");
}

TEST(Stream, LaunchBlockingMakesEveryLaunchSynchronous) {
  EXPECT_EXIT(
      {
        setenv("OPENREG_LAUNCH_BLOCKING", "1", 1);
        std::atomic<bool> ran{false};
        orError_t e = openreg::launch(nullptr, [&ran] {
          sleepMs(20);
          ran.store(true);
        });
        bool sawIt = ran.load();
        orError_t failed =
            openreg::launch(nullptr, [] { throw std::runtime_error("at the call site"); });
        bool reported =
            failed == orErrorLaunchFailure &&
            std::string(orGetLastErrorMessage()).find("at the call site") != std::string::npos;
        std::exit(e == orSuccess && sawIt && reported ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(Stream, TaskErrorIsReportedOnceAtTheNextSynchronization) {
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::atomic<bool> laterRan{false};
  OR_OK(
      openreg::launch(s, [] { throw std::runtime_error("index 7 is out of bounds for size 3"); }));
  OR_OK(openreg::launch(s, [] { throw std::runtime_error("second failure"); }));
  OR_OK(openreg::launch(s, [&laterRan] { laterRan.store(true); }));
  EXPECT_EQ(orStreamSynchronize(s), orErrorLaunchFailure);
  const std::string message = lastMessage();
  EXPECT_NE(message.find("a task failed on device 0: index 7 is out of bounds for size 3"),
            std::string::npos)
      << message;
  EXPECT_TRUE(laterRan.load());
  OR_OK(orStreamSynchronize(s));  // reported once, then cleared: the device stays usable
  OR_OK(openreg::launch(s, [] { throw 42; }));
  EXPECT_EQ(orDeviceSynchronize(), orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("non-standard exception"), std::string::npos);
  OR_OK(orStreamQuery(s));
  OR_OK(orStreamDestroy(s));
}

TEST(Task, SmallCallablesAreStoredInlineAndDestroyedOnce) {
  auto token = std::make_shared<int>(5);
  {
    openreg::Task task([token] { ++*token; });
    EXPECT_EQ(token.use_count(), 2);
    openreg::Task moved(std::move(task));
    EXPECT_FALSE(static_cast<bool>(task));
    EXPECT_EQ(token.use_count(), 2);
    moved.run(nullptr);  // a task that cannot fail needs no context
    EXPECT_EQ(*token, 6);
  }
  EXPECT_EQ(token.use_count(), 1);
  // Too large for the inline buffer: kept on the heap, same behaviour.
  std::array<char, 200> big{};
  big[199] = 3;
  int seen = 0;
  openreg::Task large([big, &seen, token] { seen = big[199]; });
  openreg::Task other;
  other = std::move(large);
  other.run(nullptr);
  EXPECT_EQ(seen, 3);
  EXPECT_EQ(token.use_count(), 2);
  other.reset();
  EXPECT_EQ(token.use_count(), 1);
  EXPECT_EQ(openreg::launchTask(nullptr, openreg::Task()), orErrorInvalidValue);
}

// Note [Tasks across the C ABI] in runtime.h: the runtime takes over a task object it is given
// with a table of functions, and destroys it exactly once whether the launch succeeds or not.
namespace {
struct CountedObject {
  int* destroyed;
};
const orTaskOps kCountedOps = {
    [](void*, orTaskContext_t) {},
    [](void* dst, void* src) { std::memcpy(dst, src, sizeof(CountedObject)); },
    [](void* self) { ++*static_cast<CountedObject*>(self)->destroyed; },
    nullptr,
    nullptr,
};
}  // namespace

TEST(Task, TheRuntimeDestroysATaskObjectOnceWhetherTheLaunchSucceedsOrNot) {
  int destroyed = 0;
  CountedObject object{&destroyed};
  OR_OK(orLaunchTask(nullptr, &kCountedOps, &object, sizeof object, orLaunchTaskWait));
  EXPECT_EQ(destroyed, 1);
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  OR_OK(orStreamDestroy(s));
  EXPECT_EQ(orLaunchTask(s, &kCountedOps, &object, sizeof object, 0), orErrorInvalidResourceHandle);
  EXPECT_EQ(destroyed, 2);
  EXPECT_EQ(orLaunchTask(nullptr, &kCountedOps, &object, OR_TASK_INLINE_BYTES + 1, 0),
            orErrorInvalidValue);
  EXPECT_EQ(destroyed, 3);
  // Without a table the runtime cannot destroy anything: the object stays the caller's.
  EXPECT_EQ(orLaunchTask(nullptr, nullptr, &object, sizeof object, 0), orErrorInvalidValue);
  EXPECT_EQ(destroyed, 3);
}

// orTaskOps forbids unwinding into the runtime. A run function that does it anyway, with the
// runtime's own C++ library, still only fails its task: the worker lives on.
TEST(Task, ARunFunctionThatLetsAnExceptionEscapeFailsItsTask) {
  static const orTaskOps ops = {
      [](void*, orTaskContext_t) { throw std::runtime_error("escaped"); },
      [](void* dst, void* src) { std::memcpy(dst, src, sizeof(int)); },
      [](void*) {},
      nullptr,
      nullptr,
  };
  int object = 0;
  EXPECT_EQ(orLaunchTask(nullptr, &ops, &object, sizeof object, orLaunchTaskWait),
            orErrorLaunchFailure);
  EXPECT_NE(lastMessage().find("let an exception escape"), std::string::npos) << lastMessage();
  OR_OK(openreg::launchAndWait(nullptr, [] {}));
}

// A task's failure reaches the caller as C: the category a TaskError carried, and its message.
TEST(Task, ATaskErrorsCategoryAndMessageCrossTheCApi) {
  EXPECT_EQ(openreg::launchAndWait(nullptr, [] { throw openreg::TaskError(3, "category three"); }),
            orErrorLaunchFailure);
  int category = 0;
  OR_OK(orGetLastErrorCategory(&category));
  EXPECT_EQ(category, 3);
  EXPECT_EQ(openreg::lastErrorCategory(), 3);
  EXPECT_NE(lastMessage().find("a task failed on device 0: category three"), std::string::npos)
      << lastMessage();
  EXPECT_EQ(orGetLastErrorCategory(nullptr), orErrorInvalidValue);
  EXPECT_EQ(openreg::lastErrorCategory(), 0);  // the last error is now that NULL argument
}

TEST(Task, CapturesAreReleasedOnceTheTaskHasRun) {
  auto token = std::make_shared<int>(0);
  Gate gate;
  OR_OK(launchGate(nullptr, gate));
  OR_OK(openreg::launch(nullptr, [token] { ++*token; }));
  EXPECT_EQ(token.use_count(), 2);  // held by the queued task
  gate.open();
  OR_OK(orStreamSynchronize(nullptr));
  EXPECT_EQ(*token, 1);
  EXPECT_EQ(token.use_count(), 1);
}

// Note [A waiting host runs the queued tasks]: with every worker of the device held by tasks of
// other streams (the tests run two workers), nothing takes the default stream's tasks, and a
// blocking copy from it runs them on the calling thread, in order, as a worker would: a
// synchronizing call inside them is refused, and the thread's last error and current device are
// its own again afterwards.
// Every worker of the device (the tests run two) held by a task of a stream of its own, until
// open() or the end of the scope.
struct WorkersHeld {
  std::array<orStream_t, 2> streams{};
  std::array<Gate, 2> gates;
  WorkersHeld() {
    for (size_t i = 0; i < streams.size(); ++i) {
      EXPECT_EQ(orStreamCreate(&streams[i]), orSuccess);
      EXPECT_EQ(launchGate(streams[i], gates[i]), orSuccess);
      gates[i].waitEntered();
    }
  }
  void open() {
    for (Gate& gate : gates) gate.open();
  }
  ~WorkersHeld() {
    open();
    EXPECT_EQ(orDeviceSynchronize(), orSuccess);
    for (orStream_t s : streams) EXPECT_EQ(orStreamDestroy(s), orSuccess);
  }
};

TEST(Stream, ABlockingCopyRunsTheQueuedTasksOnTheCallingThread) {
  WorkersHeld held;
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 16));
  std::thread::id ranOn;
  orError_t inTask = orSuccess;
  OR_OK(openreg::launch(nullptr, [&] {
    ranOn = std::this_thread::get_id();
    inTask = orDeviceSynchronize();
    orSetDevice(1);
  }));
  OR_OK(orMemsetAsync(dev, 7, 16, nullptr));
  EXPECT_EQ(orFree(reinterpret_cast<void*>(0x10)), orErrorInvalidDevicePointer);
  const std::string before = lastMessage();
  // Without the host running them the copy would wait for the workers: opened after 10 s, the
  // gates turn that wait into a failure below instead of a hang.
  std::atomic<bool> copied{false};
  std::thread opener([&] {
    for (int i = 0; i < 1000 && !copied.load(); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    held.open();
  });
  std::array<unsigned char, 16> host{};
  OR_OK(orMemcpy(host.data(), dev, host.size(), orMemcpyDeviceToHost));
  copied.store(true);
  opener.join();
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  EXPECT_EQ(inTask, orErrorNotPermitted);
  for (unsigned char byte : host) EXPECT_EQ(byte, 7);
  int device = -1;
  OR_OK(orGetDevice(&device));
  EXPECT_EQ(device, 0);
  EXPECT_EQ(lastMessage(), before);
  OR_OK(orFree(dev));
}

// A task the host runs that launches onto its own stream does not wait for the stream's lock:
// its launch runs after it, before the copy that follows, on a worker once one is free.
TEST(Stream, ATaskTheHostRunsMayLaunchOntoItsOwnStream) {
  WorkersHeld held;
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 16));
  OR_OK(orMemsetAsync(dev, 1, 16, nullptr));
  std::thread::id ranOn;
  OR_OK(openreg::launch(nullptr, [&] {
    ranOn = std::this_thread::get_id();
    orMemsetAsync(dev, 9, 16, nullptr);
  }));
  // The copy waits for the second memset, which a worker runs once the gates open.
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    held.open();
  });
  std::array<unsigned char, 16> host{};
  OR_OK(orMemcpy(host.data(), dev, host.size(), orMemcpyDeviceToHost));
  opener.join();
  EXPECT_EQ(ranOn, std::this_thread::get_id());
  for (unsigned char byte : host) EXPECT_EQ(byte, 9);
  OR_OK(orFree(dev));
}
