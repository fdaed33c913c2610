// A thread that waits for long gives its OpenMP helpers back, and only then, and by default only
// while no other process uses openreg (Note [OpenMP threads on shared cores] in
// runtime/src/OpenMpThreads.h). This binary links GNU OpenMP,
// as a process with torch does; each test runs in a fresh child with its own release time, and
// counts the process's threads: a 2-thread parallel region leaves its thread one helper.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "ProcessInfo.h"
#include "TestUtil.h"

using namespace openreg_test;

// libgomp's entry point for a parallel region: what GCC compiles `#pragma omp parallel` into.
// Called directly so that the test runs GNU OpenMP's regions whichever compiler builds it (clang
// compiles the pragma for LLVM's libomp only; make test-abi builds these tests with clang).
extern "C" void GOMP_parallel(void (*fn)(void*), void* data, unsigned numThreads, unsigned flags);

namespace {

// Runs a parallel region of 2 threads on the calling thread; returns how many threads ran it.
int parallelRegion() {
  std::atomic<int> ran{0};
  GOMP_parallel([](void* count) { static_cast<std::atomic<int>*>(count)->fetch_add(1); }, &ran,
                /*numThreads=*/2, /*flags=*/0);
  return ran.load();
}

// Waits up to `ms` for the process to have `expected` threads.
bool threadsBecome(int expected, int ms) {
  for (int i = 0; i < ms && threadCount() != expected; ++i) sleepMs(1);
  return threadCount() == expected;
}

// In a test's child process: sets the release configuration, initializes the runtime and returns
// the process's thread count (exit code 2 if initialization fails). "1" for tests that need the
// release whatever other processes do: ctest runs other test processes alongside.
int initWith(const char* release, const char* releaseMicros) {
  setenv("OPENREG_OPENMP_RELEASE", release, 1);
  setenv("OPENREG_OPENMP_RELEASE_US", releaseMicros, 1);
  if (orInit(0) != orSuccess) std::exit(2);
  return threadCount();
}

// libgomp's barriers are invisible to ThreadSanitizer, which would report every parallel region.
#if defined(__SANITIZE_THREAD__)
#define SKIP_UNDER_TSAN() GTEST_SKIP() << "GNU OpenMP is not instrumented for ThreadSanitizer"
#else
#define SKIP_UNDER_TSAN() (void)0
#endif

}  // namespace

// A worker that ran a parallel kernel keeps its helper while busy, and ends it once idle for the
// release time; its next parallel kernel starts a new one.
TEST(OpenMpThreads, AnIdleWorkerEndsItsHelpers) {
  SKIP_UNDER_TSAN();
  EXPECT_EXIT(
      {
        const int base = initWith("1", "1000");
        std::atomic<int> ran{0};
        std::atomic<int> during{0};
        auto kernel = [&] {
          ran = parallelRegion();
          during = threadCount();
        };
        if (openreg::launch(nullptr, kernel) != orSuccess) std::exit(3);
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(4);
        const int first = during;
        const bool released = threadsBecome(base, 2000);
        if (openreg::launch(nullptr, kernel) != orSuccess) std::exit(5);
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(6);
        fprintf(stderr, "threads: %d before, %d in the kernel, released %d, %d in the next\n", base,
                first, released ? 1 : 0, during.load());
        std::exit(ran == 2 && first == base + 1 && released && during == base + 1 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "threads: ");
}

// The host's helper goes while the host is blocked on the device for longer than the release time,
// before the wait returns; a wait that does not block keeps it. The device works 200 ms, far past
// the 1 ms release time, so that a host thread the machine's load keeps off a core still sleeps
// long enough (30 ms failed under a load average of 7).
TEST(OpenMpThreads, AHostBlockedOnTheDeviceEndsItsHelpers) {
  SKIP_UNDER_TSAN();
  EXPECT_EXIT(
      {
        const int base = initWith("1", "1000");
        if (parallelRegion() != 2) std::exit(3);
        const int withHelper = threadCount();
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(4);  // nothing to wait for
        const int afterShortWait = threadCount();
        // The helper is (re)made after each launch, so that only the wait can end it.
        if (openreg::launch(nullptr, [] { sleepMs(200); }) != orSuccess) std::exit(5);
        if (parallelRegion() != 2) std::exit(6);
        const int beforeLongWait = threadCount();
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(7);
        const int afterLongWait = threadCount();
        orEvent_t event = nullptr;
        if (orEventCreate(&event) != orSuccess) std::exit(8);
        if (openreg::launch(nullptr, [] { sleepMs(200); }) != orSuccess) std::exit(9);
        if (orEventRecord(event, nullptr) != orSuccess || parallelRegion() != 2) std::exit(10);
        const int beforeEventWait = threadCount();
        if (orEventSynchronize(event) != orSuccess) std::exit(11);
        const int afterEventWait = threadCount();
        fprintf(stderr,
                "threads: %d before, %d with the helper, %d after a short wait, %d and %d before "
                "and after a long one, %d and %d before and after an event wait\n",
                base, withHelper, afterShortWait, beforeLongWait, afterLongWait, beforeEventWait,
                afterEventWait);
        std::exit(withHelper == base + 1 && afterShortWait == base + 1 &&
                          beforeLongWait == base + 1 && afterLongWait == base &&
                          beforeEventWait == base + 1 && afterEventWait == base
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "threads: ");
}

// A host thread that wakes a device idle for longer than the release time ends its helper at the
// launch: it has been busy elsewhere, and the device is about to compute. A device idle for less
// does not cost it its helper. (A release time of 200 ms keeps this independent of the machine's
// load.)
TEST(OpenMpThreads, AHostThatWakesALongIdleDeviceEndsItsHelpers) {
  SKIP_UNDER_TSAN();
  EXPECT_EXIT(
      {
        initWith("1", "200000");
        if (openreg::launch(nullptr, [] {}) != orSuccess) std::exit(3);
        const int base = threadCount();
        sleepMs(400);  // the worker sleeps past the release time
        if (parallelRegion() != 2) std::exit(4);
        const int withHelper = threadCount();
        if (openreg::launch(nullptr, [] {}) != orSuccess) std::exit(5);
        // The launch releases the helper (omp_pause_resource_all); libgomp's thread then exits on
        // its own schedule, which a loaded machine delays past an immediate count.
        threadsBecome(base, 1000);
        const int afterWakingIdle = threadCount();
        if (parallelRegion() != 2) std::exit(6);
        if (openreg::launch(nullptr, [] {}) != orSuccess) std::exit(7);
        const int afterWakingBusy = threadCount();
        fprintf(stderr,
                "threads: %d before, %d with the helper, %d after waking a long idle device, %d "
                "after waking a recently busy one\n",
                base, withHelper, afterWakingIdle, afterWakingBusy);
        std::exit(withHelper == base + 1 && afterWakingIdle == base && afterWakingBusy == base + 1
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "threads: ");
}

// OPENREG_OPENMP_RELEASE_US=-1: helpers stay, however long the host waits or the worker idles.
TEST(OpenMpThreads, MinusOneNeverEndsHelpers) {
  SKIP_UNDER_TSAN();
  EXPECT_EXIT(
      {
        const int base = initWith("1", "-1");
        if (parallelRegion() != 2) std::exit(3);
        if (openreg::launch(nullptr, [] { parallelRegion(); }) != orSuccess) std::exit(4);
        if (openreg::launch(nullptr, [] { sleepMs(30); }) != orSuccess) std::exit(5);
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(6);
        sleepMs(50);
        fprintf(stderr, "threads: %d before, %d after\n", base, threadCount());
        std::exit(threadCount() == base + 2 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "threads: ");
}

// OPENREG_OPENMP_RELEASE=auto (the default): while another process holds its lock on
// $TMPDIR/openreg-processes.lock an idle worker keeps its helper; once that process is gone, it
// releases it. The other process here is a child that takes the lock as the runtime does.
TEST(OpenMpThreads, AutoReleasesOnlyWhileNoOtherProcessUsesOpenreg) {
  SKIP_UNDER_TSAN();
  EXPECT_EXIT(
      {
        char dir[] = "/tmp/openreg-omp-test-XXXXXX";
        if (mkdtemp(dir) == nullptr) std::exit(2);
        setenv("TMPDIR", dir, 1);  // counts only the processes of this test
        int ready[2];
        if (pipe(ready) != 0) std::exit(3);
        const pid_t other = fork();
        if (other == 0) {  // holds the lock until killed
          const int fd =
              open((std::string(dir) + "/openreg-processes.lock").c_str(), O_RDWR | O_CREAT, 0666);
          struct flock lock {};
          lock.l_type = F_RDLCK;
          lock.l_whence = SEEK_SET;
          lock.l_len = 1;
          const char ok = fd >= 0 && fcntl(fd, F_SETLK, &lock) == 0 ? 1 : 0;
          if (write(ready[1], &ok, 1) != 1) _exit(1);
          pause();
          _exit(0);
        }
        char ok = 0;
        if (read(ready[0], &ok, 1) != 1 || ok != 1) std::exit(4);
        const int base = initWith("auto", "1000");
        auto kernel = [] { parallelRegion(); };
        if (openreg::launch(nullptr, kernel) != orSuccess) std::exit(6);
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(7);
        sleepMs(100);  // idle well past the release time
        const int withOther = threadCount();
        kill(other, SIGKILL);
        waitpid(other, nullptr, 0);
        if (openreg::launch(nullptr, kernel) != orSuccess) std::exit(8);
        if (orStreamSynchronize(nullptr) != orSuccess) std::exit(9);
        const bool released = threadsBecome(base, 2000);
        fprintf(stderr, "threads: %d before, %d idle beside another process, released alone %d\n",
                base, withOther, released ? 1 : 0);
        unlink((std::string(dir) + "/openreg-processes.lock").c_str());
        rmdir(dir);
        std::exit(withOther == base + 1 && released ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "threads: ");
}
