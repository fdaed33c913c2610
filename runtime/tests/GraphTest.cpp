// Stream capture and graph replay: Note [Stream capture] in runtime/src/Capture.h and Note [Graph
// replay] in runtime/src/Graph.h.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {

// Tasks append their tag here, so a test sees which ran and in what order.
struct Log {
  std::mutex mutex;
  std::vector<int> tags;
  void add(int tag) {
    std::lock_guard<std::mutex> lock(mutex);
    tags.push_back(tag);
  }
  std::vector<int> take() {
    std::lock_guard<std::mutex> lock(mutex);
    return std::move(tags);
  }
};

orError_t tag(orStream_t stream, Log& log, int value) {
  return openreg::launch(stream, [&log, value] { log.add(value); });
}

// A kernel that adds one to n floats (kernel-window addresses) and declares what it touches.
struct AddOne {
  const float* in;
  float* out;
  std::size_t n;
  bool fail = false;
  void operator()() const {
    if (fail) throw openreg::TaskError(3, "aten::add: a kernel failed on purpose");
    for (std::size_t i = 0; i < n; ++i) out[i] = in[i] + 1.0f;
  }
  void accesses(openreg::AccessList& list) const {
    list.push_back({in, n * sizeof(float), /*read=*/true, /*write=*/false, /*cover=*/false});
    list.push_back({out, n * sizeof(float), /*read=*/false, /*write=*/true, /*cover=*/true});
  }
};

float* kernel(void* p) {
  void* k = nullptr;
  EXPECT_EQ(orGetKernelPointer(&k, p), orSuccess);
  return static_cast<float*>(k);
}

struct Fixture : ::testing::Test {
  orStream_t stream = nullptr;
  void SetUp() override { ASSERT_EQ(orStreamCreate(&stream), orSuccess); }
  void TearDown() override { orStreamDestroy(stream); }

  orGraphExec_t instantiate(orGraph_t graph) {
    orGraphExec_t exec = nullptr;
    EXPECT_TRUE(ok(orGraphInstantiate(&exec, graph, 0)));
    return exec;
  }
};

using GraphTest = Fixture;

TEST_F(GraphTest, CapturedTasksRunOnlyWhenLaunchedInCaptureOrderEachTime) {
  Log log;
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  orStreamCaptureStatus status;
  unsigned long long id = 0;
  OR_OK(orStreamGetCaptureInfo(stream, &status, &id));
  EXPECT_EQ(status, orStreamCaptureStatusActive);
  EXPECT_NE(id, 0u);
  for (int i = 0; i < 5; ++i) OR_OK(tag(stream, log, i));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  OR_OK(orStreamSynchronize(stream));
  EXPECT_TRUE(log.take().empty());  // recorded, not run
  OR_OK(orStreamGetCaptureInfo(stream, &status, &id));
  EXPECT_EQ(status, orStreamCaptureStatusNone);
  EXPECT_EQ(id, 0u);
  size_t tasks = 0;
  int streams = 0;
  OR_OK(orGraphGetInfo(graph, &tasks, &streams));
  EXPECT_EQ(tasks, 5u);
  EXPECT_EQ(streams, 1);

  orGraphExec_t exec = instantiate(graph);
  OR_OK(orGraphLaunch(exec, stream));
  OR_OK(orGraphLaunch(exec, stream));
  OR_OK(orStreamSynchronize(stream));
  EXPECT_EQ(log.take(), (std::vector<int>{0, 1, 2, 3, 4, 0, 1, 2, 3, 4}));
  OR_OK(orGraphExecDestroy(exec));
  OR_OK(orGraphDestroy(graph));
  EXPECT_EQ(orGraphDestroy(graph), orErrorInvalidResourceHandle);
}

TEST_F(GraphTest, ALaunchIsOrderedWithOtherWorkOnTheStream) {
  Log log;
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(tag(stream, log, 1));
  OR_OK(tag(stream, log, 2));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphExec_t exec = instantiate(graph);
  Gate gate;
  OR_OK(launchGate(stream, gate));  // everything after waits behind the gate
  OR_OK(tag(stream, log, 0));
  OR_OK(orGraphLaunch(exec, stream));
  OR_OK(tag(stream, log, 3));
  sleepMs(5);
  EXPECT_TRUE(log.take().empty());
  gate.open();
  OR_OK(orStreamSynchronize(stream));
  EXPECT_EQ(log.take(), (std::vector<int>{0, 1, 2, 3}));
  orGraphExecDestroy(exec);
  orGraphDestroy(graph);
}

TEST_F(GraphTest, MemsetsAndCopiesAreRecordedAndReadMemoryAtReplay) {
  constexpr std::size_t n = 8;
  void* a = nullptr;
  void* b = nullptr;
  float* pinned = nullptr;
  OR_OK(orMalloc(&a, n * sizeof(float)));
  OR_OK(orMalloc(&b, n * sizeof(float)));
  OR_OK(orMallocHost(reinterpret_cast<void**>(&pinned), n * sizeof(float)));
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(orMemsetAsync(b, 0, n * sizeof(float), stream));
  OR_OK(openreg::launch(stream, AddOne{kernel(a), kernel(b), n}));
  OR_OK(orMemcpyAsync(pinned, b, n * sizeof(float), orMemcpyDeviceToHost, stream));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphExec_t exec = instantiate(graph);
  for (float start : {1.0f, 41.0f}) {
    std::vector<float> host(n, start);
    OR_OK(orMemcpy(a, host.data(), n * sizeof(float), orMemcpyHostToDevice));
    OR_OK(orGraphLaunch(exec, stream));
    OR_OK(orStreamSynchronize(stream));
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(pinned[i], start + 1.0f);
  }
  orGraphExecDestroy(exec);
  orGraphDestroy(graph);
  orFreeHost(pinned);
  orFree(a);
  orFree(b);
}

TEST_F(GraphTest, AStreamForkedThroughAnEventIsCapturedAndMustJoinBack) {
  orStream_t side = nullptr;
  orEvent_t fork = nullptr;
  orEvent_t joined = nullptr;
  OR_OK(orStreamCreate(&side));
  OR_OK(orEventCreate(&fork));
  OR_OK(orEventCreate(&joined));
  Log log;
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(tag(stream, log, 1));
  OR_OK(orEventRecord(fork, stream));
  OR_OK(orStreamWaitEvent(side, fork, 0));  // side joins the capture
  orStreamCaptureStatus status;
  OR_OK(orStreamGetCaptureInfo(side, &status, nullptr));
  EXPECT_EQ(status, orStreamCaptureStatusActive);
  OR_OK(tag(side, log, 2));
  OR_OK(orEventRecord(joined, side));
  OR_OK(orStreamWaitEvent(stream, joined, 0));
  OR_OK(tag(stream, log, 3));
  EXPECT_EQ(orStreamEndCapture(side, nullptr), orErrorInvalidValue);
  orGraph_t graph = nullptr;
  EXPECT_EQ(orStreamEndCapture(side, &graph), orErrorNotPermitted);  // not the origin
  OR_OK(orStreamEndCapture(stream, &graph));
  int streams = 0;
  OR_OK(orGraphGetInfo(graph, nullptr, &streams));
  EXPECT_EQ(streams, 2);
  OR_OK(orStreamGetCaptureInfo(side, &status, nullptr));
  EXPECT_EQ(status, orStreamCaptureStatusNone);
  orGraphExec_t exec = instantiate(graph);
  OR_OK(orGraphLaunch(exec, stream));
  OR_OK(orStreamSynchronize(stream));
  EXPECT_EQ(log.take(), (std::vector<int>{1, 2, 3}));
  OR_OK(orStreamSynchronize(side));
  EXPECT_TRUE(log.take().empty());  // the side stream itself ran nothing

  // The same fork without the join: the end of the capture refuses it.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(orEventRecord(fork, stream));
  OR_OK(orStreamWaitEvent(side, fork, 0));
  OR_OK(tag(side, log, 9));
  orGraph_t unjoined = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &unjoined), orErrorStreamCaptureInvalidated);
  // The stream is named by device and number (its handle's slot), not by its 64-bit handle.
  const std::string sideName =
      "openreg:0 stream " + std::to_string(reinterpret_cast<std::uint64_t>(side) >> 32);
  EXPECT_NE(lastMessage().find(sideName + " was forked off the capture and not joined back"),
            std::string::npos)
      << lastMessage();
  EXPECT_EQ(unjoined, nullptr);
  OR_OK(tag(side, log, 4));  // both streams work again
  OR_OK(orStreamSynchronize(side));
  EXPECT_EQ(log.take(), (std::vector<int>{4}));
  orGraphExecDestroy(exec);
  orGraphDestroy(graph);
  orEventDestroy(fork);
  orEventDestroy(joined);
  orStreamDestroy(side);
}

TEST_F(GraphTest, SynchronizingTheCapturingStreamInvalidatesTheCaptureAndLeavesTheStreamUsable) {
  Log log;
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeRelaxed));
  OR_OK(tag(stream, log, 1));
  EXPECT_EQ(orStreamSynchronize(stream), orErrorStreamCaptureUnsupported);
  EXPECT_NE(lastMessage().find("orStreamSynchronize"), std::string::npos) << lastMessage();
  orStreamCaptureStatus status;
  OR_OK(orStreamGetCaptureInfo(stream, &status, nullptr));
  EXPECT_EQ(status, orStreamCaptureStatusInvalidated);
  EXPECT_EQ(tag(stream, log, 2), orErrorStreamCaptureInvalidated);
  EXPECT_EQ(orStreamQuery(stream), orErrorStreamCaptureUnsupported);
  EXPECT_EQ(orStreamDestroy(stream), orErrorStreamCaptureUnsupported);
  orGraph_t graph = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  EXPECT_NE(lastMessage().find("orStreamSynchronize"), std::string::npos) << lastMessage();
  EXPECT_EQ(graph, nullptr);
  OR_OK(tag(stream, log, 3));
  OR_OK(orStreamSynchronize(stream));
  EXPECT_EQ(log.take(), (std::vector<int>{3}));
}

TEST_F(GraphTest, CopiesThatMustCompleteCannotBeCaptured) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 64));
  std::vector<char> pageable(64);
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeRelaxed));
  EXPECT_EQ(orMemcpyAsync(pageable.data(), d, 64, orMemcpyDeviceToHost, stream),
            orErrorStreamCaptureUnsupported);
  EXPECT_NE(lastMessage().find("pageable"), std::string::npos) << lastMessage();
  orGraph_t graph = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeRelaxed));
  EXPECT_EQ(openreg::launchAndWait(stream, [] {}), orErrorStreamCaptureUnsupported);
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  OR_OK(orMemcpyAsync(pageable.data(), d, 64, orMemcpyDeviceToHost, stream));
  orFree(d);
}

TEST_F(GraphTest, StrictModesForbidSynchronizingCallsAsDocumented) {
  void* d = nullptr;
  OR_OK(orMalloc(&d, 64));
  const auto fromOtherThread = [](auto fn) {
    orError_t e = orSuccess;
    std::thread([&] { e = fn(); }).join();
    return e;
  };
  orGraph_t graph = nullptr;
  // Global: any thread.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  EXPECT_EQ(fromOtherThread([] { return orDeviceSynchronize(); }), orErrorStreamCaptureUnsupported);
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  // Thread-local: only the capturing thread.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeThreadLocal));
  OR_EXPECT_OK(fromOtherThread([] { return orDeviceSynchronize(); }));
  EXPECT_EQ(orMemset(d, 0, 64), orErrorStreamCaptureUnsupported);
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  // Relaxed: allowed, and allocation is allowed in every mode.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeRelaxed));
  OR_EXPECT_OK(orDeviceSynchronize());
  OR_EXPECT_OK(orMemset(d, 0, 64));
  void* more = nullptr;
  OR_EXPECT_OK(orMalloc(&more, 64));
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphDestroy(graph);
  orFree(more);
  orFree(d);
  EXPECT_EQ(orStreamBeginCapture(stream, static_cast<orStreamCaptureMode>(7)), orErrorInvalidValue);
}

TEST_F(GraphTest, WaitingOnPendingWorkOutsideTheCaptureIsRefused) {
  orStream_t other = nullptr;
  orEvent_t event = nullptr;
  OR_OK(orStreamCreate(&other));
  OR_OK(orEventCreate(&event));
  Gate gate;
  OR_OK(launchGate(other, gate));
  OR_OK(orEventRecord(event, other));
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  EXPECT_EQ(orStreamWaitEvent(stream, event, 0), orErrorStreamCaptureUnsupported);
  orGraph_t graph = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorStreamCaptureInvalidated);
  gate.open();
  OR_OK(orStreamSynchronize(other));
  // Once that work is done, a wait on it is nothing to record.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(orStreamWaitEvent(stream, event, 0));
  OR_OK(orStreamEndCapture(stream, &graph));
  // An event recorded in the capture cannot be asked about by the host.
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeRelaxed));
  OR_OK(orEventRecord(event, stream));
  EXPECT_EQ(orEventQuery(event), orErrorStreamCaptureUnsupported);
  orGraph_t invalid = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &invalid), orErrorStreamCaptureInvalidated);
  OR_OK(orEventQuery(event));  // the record before the capture
  orGraphDestroy(graph);
  orEventDestroy(event);
  orStreamDestroy(other);
}

TEST_F(GraphTest, AFailingReplayedTaskPoisonsItsOutputAndReportsOnTheReplayingStream) {
  constexpr std::size_t n = 4;
  void* a = nullptr;
  void* b = nullptr;
  void* c = nullptr;
  OR_OK(orMalloc(&a, n * sizeof(float)));
  OR_OK(orMalloc(&b, n * sizeof(float)));
  OR_OK(orMalloc(&c, n * sizeof(float)));
  OR_OK(orMemset(a, 0, n * sizeof(float)));
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(openreg::launch(stream, AddOne{kernel(a), kernel(b), n, /*fail=*/true}));
  OR_OK(openreg::launch(stream, AddOne{kernel(b), kernel(c), n}));  // reads the poisoned b
  OR_OK(openreg::launch(stream, AddOne{kernel(a), kernel(a), n}));  // independent
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphExec_t exec = instantiate(graph);
  for (int replay = 1; replay <= 2; ++replay) {
    OR_OK(orGraphLaunch(exec, stream));
    EXPECT_EQ(orStreamSynchronize(stream), orErrorLaunchFailure);
    EXPECT_NE(lastMessage().find("a kernel failed on purpose"), std::string::npos) << lastMessage();
    float host[n];
    EXPECT_EQ(orMemcpy(host, c, sizeof host, orMemcpyDeviceToHost), orErrorLaunchFailure);
    OR_OK(orMemcpy(host, a, sizeof host, orMemcpyDeviceToHost));
    EXPECT_EQ(host[0], static_cast<float>(replay));  // the independent task ran every time
  }
  OR_OK(orStreamSynchronize(stream));  // reported once per failure; the stream goes on
  orGraphExecDestroy(exec);
  orGraphDestroy(graph);
  orFree(a);
  orFree(b);
  orFree(c);
}

TEST_F(GraphTest, AnExecutableGraphOutlivesItsGraphAndItsLaunchesOutliveIt) {
  Log log;
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(tag(stream, log, 7));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphExec_t exec = instantiate(graph);
  OR_OK(orGraphDestroy(graph));
  Gate gate;
  OR_OK(launchGate(stream, gate));
  OR_OK(orGraphLaunch(exec, stream));
  OR_OK(orGraphExecDestroy(exec));
  EXPECT_EQ(orGraphLaunch(exec, stream), orErrorInvalidResourceHandle);
  gate.open();
  OR_OK(orStreamSynchronize(stream));
  EXPECT_EQ(log.take(), (std::vector<int>{7}));
}

TEST_F(GraphTest, LaunchChecksTheDeviceAndRefusesACapturingStream) {
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(openreg::launch(stream, [] {}));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  orGraphExec_t exec = instantiate(graph);
  int count = 0;
  OR_OK(orGetDeviceCount(&count));
  if (count > 1) {
    orStream_t other = nullptr;
    OR_OK(orDeviceGetDefaultStream(1, &other));
    EXPECT_EQ(orGraphLaunch(exec, other), orErrorInvalidResourceHandle);
  }
  orStream_t capturing = nullptr;
  OR_OK(orStreamCreate(&capturing));
  OR_OK(orStreamBeginCapture(capturing, orStreamCaptureModeGlobal));
  EXPECT_EQ(orGraphLaunch(exec, capturing), orErrorStreamCaptureUnsupported);
  orGraph_t invalid = nullptr;
  EXPECT_EQ(orStreamEndCapture(capturing, &invalid), orErrorStreamCaptureInvalidated);
  EXPECT_EQ(orStreamBeginCapture(stream, orStreamCaptureModeGlobal), orSuccess);
  EXPECT_EQ(orStreamBeginCapture(stream, orStreamCaptureModeGlobal), orErrorNotPermitted);
  OR_OK(orStreamEndCapture(stream, &invalid));
  orGraphDestroy(invalid);
  orGraphExecDestroy(exec);
  orGraphDestroy(graph);
  orStreamDestroy(capturing);
}

TEST_F(GraphTest, DebugDotPrintDescribesTasksStreamsAndMemory) {
  constexpr std::size_t n = 4;
  void* a = nullptr;
  OR_OK(orMalloc(&a, n * sizeof(float)));
  orStream_t side = nullptr;
  orEvent_t e1 = nullptr;
  orEvent_t e2 = nullptr;
  OR_OK(orStreamCreate(&side));
  OR_OK(orEventCreate(&e1));
  OR_OK(orEventCreate(&e2));
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(orEventRecord(e1, stream));
  OR_OK(orStreamWaitEvent(side, e1, 0));
  OR_OK(openreg::launch(side, AddOne{kernel(a), kernel(a), n}));
  OR_OK(orMemsetAsync(a, 0, n * sizeof(float), side));
  OR_OK(orEventRecord(e2, side));
  OR_OK(orStreamWaitEvent(stream, e2, 0));
  orGraph_t graph = nullptr;
  OR_OK(orStreamEndCapture(stream, &graph));
  const std::string path = ::testing::TempDir() + "openreg_graph_test.dot";
  OR_OK(orGraphDebugDotPrint(graph, path.c_str(), 0));
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  const std::string dot = text.str();
  EXPECT_EQ(dot.rfind("digraph", 0), 0u) << dot;
  EXPECT_NE(dot.find("2 stream(s)"), std::string::npos) << dot;
  EXPECT_NE(dot.find("task 0"), std::string::npos) << dot;
  EXPECT_NE(dot.find("task 1: memset"), std::string::npos) << dot;  // a task that names itself
  EXPECT_NE(dot.find("\\nreads 0x"), std::string::npos) << dot;
  EXPECT_NE(dot.find("\\nwrites 0x"), std::string::npos) << dot;
  EXPECT_NE(dot.find("style=dashed"), std::string::npos) << dot;  // the fork and the join
  std::remove(path.c_str());
  EXPECT_EQ(orGraphDebugDotPrint(graph, "/nonexistent-dir/x.dot", 0), orErrorInvalidValue);
  orGraphDestroy(graph);
  orEventDestroy(e1);
  orEventDestroy(e2);
  orStreamDestroy(side);
  orFree(a);
}

TEST_F(GraphTest, BadHandlesAndNullPointersAreRefusedNamingTheCall) {
  const auto stale = reinterpret_cast<orGraph_t>(std::uintptr_t{0x123400000001});
  const auto staleExec = reinterpret_cast<orGraphExec_t>(std::uintptr_t{0x123400000001});
  const auto staleStream = reinterpret_cast<orStream_t>(std::uintptr_t{0x123400000001});
  orGraphExec_t exec = nullptr;
  EXPECT_EQ(orGraphInstantiate(&exec, stale, 0), orErrorInvalidResourceHandle);
  EXPECT_NE(lastMessage().find("orGraphInstantiate"), std::string::npos) << lastMessage();
  EXPECT_EQ(orGraphLaunch(staleExec, stream), orErrorInvalidResourceHandle);
  EXPECT_NE(lastMessage().find("orGraphLaunch"), std::string::npos) << lastMessage();
  EXPECT_EQ(orGraphGetInfo(stale, nullptr, nullptr), orErrorInvalidResourceHandle);
  EXPECT_EQ(orGraphDebugDotPrint(stale, "/tmp/x.dot", 0), orErrorInvalidResourceHandle);
  EXPECT_EQ(orGraphExecDestroy(staleExec), orErrorInvalidResourceHandle);
  EXPECT_EQ(orStreamBeginCapture(staleStream, orStreamCaptureModeGlobal),
            orErrorInvalidResourceHandle);
  orStreamCaptureStatus status;
  EXPECT_EQ(orStreamGetCaptureInfo(stream, nullptr, nullptr), orErrorInvalidValue);
  EXPECT_EQ(orStreamGetCaptureInfo(staleStream, &status, nullptr), orErrorInvalidResourceHandle);
  orGraph_t graph = nullptr;
  EXPECT_EQ(orStreamEndCapture(stream, &graph), orErrorNotPermitted);  // not capturing
  OR_OK(orStreamBeginCapture(stream, orStreamCaptureModeGlobal));
  OR_OK(orStreamEndCapture(stream, &graph));
  EXPECT_EQ(orGraphInstantiate(nullptr, graph, 0), orErrorInvalidValue);
  EXPECT_NE(lastMessage().find("exec is NULL"), std::string::npos) << lastMessage();
  EXPECT_EQ(orGraphInstantiate(&exec, graph, 1), orErrorInvalidValue);
  EXPECT_EQ(orGraphDebugDotPrint(graph, nullptr, 0), orErrorInvalidValue);
  EXPECT_EQ(orGraphDebugDotPrint(graph, "/tmp/x.dot", 4), orErrorInvalidValue);
  OR_OK(orGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(orGraphLaunch(exec, staleStream), orErrorInvalidResourceHandle);
  OR_OK(orGraphLaunch(exec, stream));  // an empty graph is a no-op launch
  OR_OK(orStreamSynchronize(stream));
  OR_OK(orGraphExecDestroy(exec));
  OR_OK(orGraphDestroy(graph));
}

}  // namespace
