// Synchronizing calls made from inside a task return orErrorNotPermitted instead of deadlocking.
// See Note [Synchronizing inside a task] in runtime/src/Executor.h.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

struct InTaskCall {
  const char* name;
  std::function<orError_t()> call;
};

// Runs `call` inside a task on the current device's default stream and returns its result and
// message, as seen on the worker.
std::pair<orError_t, std::string> runInTask(const std::function<orError_t()>& call) {
  std::pair<orError_t, std::string> result{orSuccess, ""};
  if (!ok(openreg::launch(nullptr, [&] {
        result.first = call();
        result.second = orGetLastErrorMessage();
      }))) {
    return {orErrorLaunchFailure, "launch failed"};
  }
  if (!ok(orDeviceSynchronize())) return {orErrorLaunchFailure, "synchronize failed"};
  return result;
}

// The child of SynchronizingCallsFromATaskAreNotPermitted: every synchronizing call, made from a
// task, must fail with orErrorNotPermitted and a message naming it. Returns the exit code.
int synchronizingCallsFromATask() {
  alarm(20);
  void* dev = nullptr;
  void* doomed = nullptr;
  void* pinned = nullptr;
  orEvent_t event;
  std::vector<char> host(64);
  if (orMalloc(&dev, 64) != orSuccess || orMalloc(&doomed, 64) != orSuccess ||
      orMallocHost(&pinned, 64) != orSuccess || orEventCreate(&event) != orSuccess ||
      orEventRecord(event, nullptr) != orSuccess) {
    return 2;
  }
  const std::vector<InTaskCall> calls = {
      {"orFree", [&] { return orFree(doomed); }},
      {"orFreeHost", [&] { return orFreeHost(pinned); }},
      {"orDeviceSynchronize", [] { return orDeviceSynchronize(); }},
      {"orStreamSynchronize", [] { return orStreamSynchronize(nullptr); }},
      {"orEventSynchronize",
       [&] {
         // A record behind the running task: waiting for it would wait for ourselves.
         orEventRecord(event, nullptr);
         return orEventSynchronize(event);
       }},
      {"orMemcpy", [&] { return orMemcpy(host.data(), dev, 64, orMemcpyDeviceToHost); }},
      {"orMemset", [&] { return orMemset(dev, 0, 64); }},
      {"orMemcpyAsync",  // pageable memory: completes before returning, so it synchronizes
       [&] { return orMemcpyAsync(host.data(), dev, 64, orMemcpyDeviceToHost, nullptr); }},
      {"orIpcCloseMemHandle", [&] { return orIpcCloseMemHandle(dev); }},
      {"orIpcDiscardMemHandle", [&] { return orIpcDiscardMemHandle(orIpcMemHandle_t{}); }},
  };
  int bad = 0;
  for (const InTaskCall& c : calls) {
    const auto [e, message] = runInTask(c.call);
    const bool good =
        e == orErrorNotPermitted && message.find(std::string("openreg: ") + c.name + ":") == 0 &&
        message.find("synchronizing calls are forbidden inside a task") != std::string::npos;
    fprintf(stderr, "%s: %s: %s\n", c.name, orGetErrorName(e), message.c_str());
    bad += good ? 0 : 1;
  }
  // Nothing was freed: the host may still free both.
  const bool freed = orFree(doomed) == orSuccess && orFreeHost(pinned) == orSuccess &&
                     orFree(dev) == orSuccess && orEventDestroy(event) == orSuccess;
  return bad == 0 && freed ? 0 : 1;
}

}  // namespace

// In a child process with a watchdog: before the fix, the first of these calls deadlocks its own
// stream, and the alarm turns the hang into a failure instead of a stuck test.
TEST(InTask, SynchronizingCallsFromATaskAreNotPermitted) {
  EXPECT_EXIT(std::exit(synchronizingCallsFromATask()), ::testing::ExitedWithCode(0), "");
}

TEST(InTask, NonSynchronizingCallsFromATaskStillWork) {
  void* dev = nullptr;
  OR_OK(orMalloc(&dev, 64));
  orStream_t other;
  OR_OK(orStreamCreate(&other));
  std::atomic<int> innerRan{0};
  orError_t launched = orErrorNotReady, queried = orErrorNotReady, memset = orErrorNotReady;
  OR_OK(openreg::launch(nullptr, [&] {
    launched = openreg::launch(other, [&innerRan] { innerRan.store(1); });
    queried = orStreamQuery(nullptr) == orErrorNotReady ? orSuccess : orErrorInvalidValue;
    memset = orMemsetAsync(dev, 7, 64, other);
  }));
  OR_OK(orDeviceSynchronize());
  OR_EXPECT_OK(launched);
  OR_EXPECT_OK(queried);  // the running task counts as pending
  OR_EXPECT_OK(memset);
  EXPECT_EQ(innerRan.load(), 1);
  std::vector<char> out(64);
  OR_OK(orMemcpy(out.data(), dev, 64, orMemcpyDeviceToHost));
  EXPECT_EQ(out, std::vector<char>(64, 7));
  OR_OK(orStreamDestroy(other));
  OR_OK(orFree(dev));
}

// Under OPENREG_LAUNCH_BLOCKING a launch waits for its task; from inside a task it would wait for
// its own stream, so there it returns at once and the task runs afterwards.
TEST(InTask, ALaunchFromATaskDoesNotBlockUnderLaunchBlocking) {
  EXPECT_EXIT(
      {
        alarm(20);
        setenv("OPENREG_LAUNCH_BLOCKING", "1", 1);
        std::atomic<int> order{0};
        int innerSaw = -1;
        orError_t inner = orErrorNotReady;
        const orError_t outer = openreg::launch(nullptr, [&] {
          inner = openreg::launch(nullptr, [&] { innerSaw = order.fetch_add(1); });
          order.fetch_add(1);
        });
        std::exit(outer == orSuccess && orDeviceSynchronize() == orSuccess && inner == orSuccess &&
                          innerSaw == 1
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}
