// Failure: what a failed task leaves behind, shared by everything it reaches.
//
// One failure is one immutable object: the message (device, and whatever the task said: for the
// PyTorch layer, the operator and the CPU kernel's message) and the category the task attached
// (orTaskFail; openreg::TaskError in C++). The stream that ran the task, the event records
// completed after it, the streams that waited on those records and every byte of memory it
// poisoned hold the same object, so whoever meets it reports the original error, word for word.
// See Note [Task errors] in Stream.cpp and Note [Poisoned memory] in Poison.h.
#pragma once

#include <openreg/runtime.h>

#include <memory>
#include <string>

namespace openreg {

struct Failure {
  std::string message;
  int category = 0;
};
using FailureRef = std::shared_ptr<const Failure>;

// Sets the calling thread's last error to `failure` and returns orErrorLaunchFailure.
orError_t report(const Failure& failure);

}  // namespace openreg

// What an orTaskContext_t points to: the failure the running task reported with orTaskFail, as
// the task gave it (Stream::runTask adds the device). On the worker's stack, one per run.
struct orTaskContext_st {
  openreg::Failure failure;
  bool failed = false;
};
