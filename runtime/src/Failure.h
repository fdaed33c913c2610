// Failure: what a failed task leaves behind, shared by everything it reaches.
//
// One failure is one object: the message (device, and whatever the task said: for the PyTorch
// layer, the operator and the CPU kernel's message) and the category the task attached
// (orTaskFail; openreg::TaskError in C++), both immutable, and whether it has been reported to
// the program yet. The stream that ran the task, the event records completed after it, the
// streams that waited on those records and every byte of memory it poisoned hold the same object,
// so whoever meets it reports the original error, word for word, and one report ends it
// everywhere but in the data. See Note [Task errors] in Stream.cpp and Note [Poisoned memory] in
// Poison.h.
#pragma once

#include <openreg/runtime.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>

namespace openreg {

struct Failure {
  explicit Failure(std::string text, int kind = 0) : message(std::move(text)), category(kind) {}

  const std::string message;
  const int category;
  // Set by the first report() of this failure to a caller (Note [Task errors] in Stream.cpp): from
  // then on streams and event records no longer carry it; poisoned memory still does.
  mutable std::atomic<bool> reported{false};

  bool wasReported() const { return reported.load(std::memory_order_acquire); }
};
using FailureRef = std::shared_ptr<const Failure>;

// Sets the calling thread's last error to `failure`, marks it reported and returns
// orErrorLaunchFailure.
orError_t report(const Failure& failure);

}  // namespace openreg

// What an orTaskContext_t points to: the failure the running task reported with orTaskFail, as
// the task gave it (Stream::runTask adds the device). On the worker's stack, one per run.
struct orTaskContext_st {
  std::string message;
  int category = 0;
  bool failed = false;

  // orTaskFail: the first report of a run counts, later ones are ignored.
  void report(int reportedCategory, const char* reportedMessage) noexcept {
    if (failed) return;
    failed = true;
    category = reportedCategory;
    try {
      message = reportedMessage != nullptr ? reportedMessage : "a task failed without a message";
    } catch (...) {
      // No host memory for the message: the failure and its category still count.
      message.clear();
    }
  }
};
