// Helpers shared by the runtime tests.
#pragma once

#include <gtest/gtest.h>
#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

namespace openreg_test {

inline ::testing::AssertionResult ok(orError_t e) {
  if (e == orSuccess) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << orGetErrorName(e) << ": " << orGetLastErrorMessage();
}

// A task that blocks its stream until the test opens it, so a test can observe pending work.
struct Gate {
  std::atomic<bool> opened{false};
  std::atomic<bool> entered{false};
  void pass() {
    entered.store(true);
    while (!opened.load()) std::this_thread::yield();
  }
  void open() { opened.store(true); }
  void waitEntered() const {
    while (!entered.load()) std::this_thread::yield();
  }
};

inline orError_t launchGate(orStream_t stream, Gate& gate) {
  return openreg::launch(stream, [&gate] { gate.pass(); });
}

inline std::string lastMessage() {
  return orGetLastErrorMessage();
}

inline void sleepMs(int ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

}  // namespace openreg_test

#define OR_OK(expr) ASSERT_TRUE(::openreg_test::ok(expr))
#define OR_EXPECT_OK(expr) EXPECT_TRUE(::openreg_test::ok(expr))
