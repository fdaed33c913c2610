// Multi-threaded stress of streams, events and memory: ordering, cross-stream and cross-device
// waits, concurrent handle churn. Also run under ThreadSanitizer (make sanitize).
#include <array>
#include <random>
#include <thread>
#include <vector>

#include "TestUtil.h"

using namespace openreg_test;

namespace {
// Sanitizer builds are several times slower; OPENREG_STRESS_SCALE shrinks the loops there.
int scaled(int n) {
  const char* scale = std::getenv("OPENREG_STRESS_SCALE");
  const int divisor = scale != nullptr ? std::max(1, std::atoi(scale)) : 1;
  return std::max(1, n / divisor);
}
}  // namespace

TEST(Stress, ThreadsLaunchingOnTheirOwnStreamsKeepEveryStreamInOrder) {
  constexpr int kThreads = 4;
  const int kTasks = scaled(20000);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      orSetDevice(t % 2);
      orStream_t s;
      if (orStreamCreate(&s) != orSuccess) return failures.fetch_add(1), void();
      auto expected = std::make_shared<int>(0);
      for (int i = 0; i < kTasks; ++i) {
        if (openreg::launch(s, [expected, i, &failures] {
              if ((*expected)++ != i) failures.fetch_add(1);
            }) != orSuccess) {
          failures.fetch_add(1);
        }
      }
      if (orStreamSynchronize(s) != orSuccess || *expected != kTasks) failures.fetch_add(1);
      orStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
}

TEST(Stress, ThreadsSharingOneStreamKeepEachThreadsOrder) {
  constexpr int kThreads = 4;
  const int kTasks = scaled(10000);
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::vector<int> last(kThreads, -1);  // touched only by the stream's tasks, one at a time
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        openreg::launch(s, [&last, &failures, t, i] {
          if (last[t] != i - 1) failures.fetch_add(1);
          last[t] = i;
        });
      }
    });
  }
  for (auto& t : threads) t.join();
  OR_OK(orStreamSynchronize(s));
  EXPECT_EQ(failures.load(), 0);
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(last[t], kTasks - 1);
  OR_OK(orStreamDestroy(s));
}

TEST(Stress, EventPingPongBetweenDevices) {
  // Two streams on two devices hand a value back and forth through device memory, ordered only
  // by events. Any missing or early wait shows up as a wrong value.
  const int kRounds = scaled(2000);
  orStream_t s[2];
  orEvent_t e[2];
  void* cell[2];
  void* kcell[2];
  for (int d = 0; d < 2; ++d) {
    OR_OK(orSetDevice(d));
    OR_OK(orStreamCreate(&s[d]));
    OR_OK(orEventCreateWithFlags(&e[d], orEventDisableTiming));
    OR_OK(orMalloc(&cell[d], sizeof(int)));
    OR_OK(orGetKernelPointer(&kcell[d], cell[d]));
  }
  OR_OK(orSetDevice(0));
  OR_OK(orMemset(cell[0], 0, sizeof(int)));
  std::atomic<int> failures{0};
  for (int i = 0; i < kRounds; ++i) {
    const int from = i % 2, to = 1 - from;
    int* src = static_cast<int*>(kcell[from]);
    int* dst = static_cast<int*>(kcell[to]);
    OR_OK(orStreamWaitEvent(s[from], e[to], 0));
    OR_OK(openreg::launch(s[from], [src, dst, i, &failures] {
      if (*src != i) failures.fetch_add(1);
      *dst = i + 1;
    }));
    OR_OK(orEventRecord(e[from], s[from]));
  }
  OR_OK(orStreamSynchronize(s[0]));
  OR_OK(orStreamSynchronize(s[1]));
  EXPECT_EQ(failures.load(), 0);
  int final = -1;
  OR_OK(orMemcpy(&final, cell[kRounds % 2], sizeof final, orMemcpyDeviceToHost));
  EXPECT_EQ(final, kRounds);
  for (int d = 0; d < 2; ++d) {
    OR_OK(orEventDestroy(e[d]));
    OR_OK(orStreamDestroy(s[d]));
    OR_OK(orFree(cell[d]));
  }
}

TEST(Stress, ConcurrentHandleChurnWhileLaunching) {
  const int kIterations = scaled(2000);
  std::atomic<int> failures{0};
  std::atomic<int> ran{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      orSetDevice(t % 2);
      for (int i = 0; i < kIterations; ++i) {
        orStream_t s;
        orEvent_t e;
        if (orStreamCreate(&s) != orSuccess || orEventCreate(&e) != orSuccess) {
          failures.fetch_add(1);
          continue;
        }
        openreg::launch(s, [&ran] { ran.fetch_add(1); });
        orEventRecord(e, s);
        orStreamWaitEvent(nullptr, e, 0);
        if (orEventDestroy(e) != orSuccess || orStreamDestroy(s) != orSuccess)
          failures.fetch_add(1);
        if (orStreamQuery(s) != orErrorInvalidResourceHandle) failures.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int d = 0; d < 2; ++d) {
    OR_OK(orSetDevice(d));
    OR_OK(orDeviceSynchronize());
  }
  OR_OK(orSetDevice(0));
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ran.load(), 4 * kIterations);
}

TEST(Stress, ConcurrentAllocationsNeverOverlap) {
  const int kIterations = scaled(300);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(t);
      orStream_t s;
      orStreamCreate(&s);
      std::vector<std::pair<void*, size_t>> live;
      for (int i = 0; i < kIterations; ++i) {
        const size_t n = 1 + rng() % 50000;
        void* p = nullptr;
        if (orMalloc(&p, n) != orSuccess) {
          failures.fetch_add(1);
          continue;
        }
        orMemsetAsync(p, t * 16 + i % 16, n, s);
        live.emplace_back(p, n);
        if (live.size() > 8) {
          // Check the oldest still holds its own fill, then free it.
          auto [q, m] = live.front();
          const int fill = t * 16 + (i - 8) % 16;
          std::vector<unsigned char> back(m);
          orMemcpyAsync(back.data(), q, m, orMemcpyDeviceToHost, s);
          for (unsigned char c : back) {
            if (c != static_cast<unsigned char>(fill)) {
              failures.fetch_add(1);
              break;
            }
          }
          if (orFree(q) != orSuccess) failures.fetch_add(1);
          live.erase(live.begin());
        }
      }
      for (auto& [p, n] : live) orFree(p);
      orStreamDestroy(s);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  size_t free = 0, total = 0;
  OR_OK(orMemGetInfo(&free, &total));
  EXPECT_EQ(free, total);
}

TEST(Stress, ReRecordingAnEventWhileAnotherStreamWaitsOnIt) {
  const int kRounds = scaled(3000);
  orStream_t producer, consumer;
  OR_OK(orStreamCreate(&producer));
  OR_OK(orStreamCreate(&consumer));
  orEvent_t e;
  OR_OK(orEventCreateWithFlags(&e, orEventDisableTiming));
  std::atomic<int> produced{0};
  std::atomic<int> failures{0};
  for (int i = 1; i <= kRounds; ++i) {
    OR_OK(openreg::launch(producer, [&produced, i] { produced.store(i); }));
    OR_OK(orEventRecord(e, producer));
    OR_OK(orStreamWaitEvent(consumer, e, 0));
    OR_OK(openreg::launch(consumer, [&produced, &failures, i] {
      if (produced.load() < i) failures.fetch_add(1);
    }));
  }
  OR_OK(orStreamSynchronize(consumer));
  EXPECT_EQ(failures.load(), 0);
  OR_OK(orEventDestroy(e));
  OR_OK(orStreamDestroy(producer));
  OR_OK(orStreamDestroy(consumer));
}

// A blocking launch returns only once its own task has run, while other threads launch on the
// same stream: its wait ticket must cover its operation whatever order the producers' appends
// land in (Note [Lock-free stream queue] in runtime/src/Stream.cpp).
TEST(Stress, ABlockingLaunchWaitsForItsOwnTaskWhileOtherThreadsLaunch) {
  constexpr int kThreads = 3;
  const int kTasks = scaled(1000);
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kTasks; ++i) {
        if (t == 0) {
          std::atomic<bool> ran{false};
          if (openreg::launchAndWait(s, [&ran] { ran.store(true); }) != orSuccess || !ran.load()) {
            failures.fetch_add(1);
          }
        } else if (openreg::launch(s, [] {}) != orSuccess) {
          failures.fetch_add(1);
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  OR_OK(orStreamSynchronize(s));
  EXPECT_EQ(failures.load(), 0);
  OR_OK(orStreamDestroy(s));
}

// Large callables and queue nodes come from per-thread recycled memory that the worker gives
// back to the launching thread (Note [Recycled launch memory] in runtime/src/Pool.h). Threads
// that launch and exit before their tasks run leave their memory to later threads: every task
// still runs once and every capture is destroyed once.
TEST(Stress, TasksOfThreadsThatHaveExitedRunOnceAndReleaseTheirCaptures) {
  const int kRounds = scaled(40);
  constexpr int kThreads = 4;
  constexpr int kTasks = 200;
  orStream_t s;
  OR_OK(orStreamCreate(&s));
  orEvent_t event;
  OR_OK(orEventCreate(&event));
  auto token = std::make_shared<int>(0);
  std::atomic<int> ran{0};
  for (int round = 0; round < kRounds; ++round) {
    Gate gate;
    OR_OK(launchGate(s, gate));
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::array<char, 300> big{};  // too large for Task's inline storage
        big[299] = static_cast<char>(t + 1);
        for (int i = 0; i < kTasks; ++i) {
          openreg::launch(s, [big, token, &ran] { ran.fetch_add(big[299] > 0 ? 1 : 0); });
          if (i % 50 == 0) orEventRecord(event, s);
        }
      });
    }
    for (auto& t : threads) t.join();  // they exit with all their tasks still queued
    EXPECT_EQ(token.use_count(), 1 + kThreads * kTasks);
    EXPECT_EQ(orEventQuery(event), orErrorNotReady);
    gate.open();
    OR_OK(orStreamSynchronize(s));
    OR_OK(orEventQuery(event));
    EXPECT_EQ(token.use_count(), 1);
  }
  EXPECT_EQ(ran.load(), kRounds * kThreads * kTasks);
  OR_OK(orEventDestroy(event));
  OR_OK(orStreamDestroy(s));
}
