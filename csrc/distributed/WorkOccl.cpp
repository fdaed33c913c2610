#include "distributed/WorkOccl.h"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <mutex>
#include <unordered_set>
#include <utility>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"

namespace openreg::distributed {

namespace {

std::vector<c10::Device> futureDevices(const std::optional<c10::Device>& device) {
  if (device.has_value()) return {*device};
  return {};
}

// Gloo's failure, or a failed kernel that produced the inputs, restated with the backend, the
// operation and the device, keeping DistBackendError's type so that Python sees
// torch.distributed.DistBackendError.
std::exception_ptr restated(const std::string& opName, const std::optional<c10::Device>& device,
                            std::exception_ptr error) {
  std::string what;
  try {
    std::rethrow_exception(std::move(error));
  } catch (const c10::Error& e) {
    what = e.what_without_backtrace();
  } catch (const std::exception& e) {
    what = e.what();
  }
  const std::string where = device.has_value() ? device->str() : std::string("cpu");
  return std::make_exception_ptr(
      c10::DistBackendError({__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                            "occl " + opName + " on " + where + " failed: " + what));
}

// The activity's name outlives the Work (the profiler reads it when the recording ends), so it is
// interned: one immortal string per operation name.
const char* activityName(const std::string& opName) {
  static std::mutex* mutex = new std::mutex();
  static auto* names = new std::unordered_set<std::string>();
  std::lock_guard<std::mutex> lock(*mutex);
  return names->insert("occl " + opName).first->c_str();
}

}  // namespace

WorkOccl::WorkOccl(int rank, c10d::OpType opType, std::string opName,
                   std::optional<c10::Device> device, std::vector<at::Tensor> tensors,
                   std::vector<at::Tensor> outputs, Launch launch, After after)
    : c10d::Work(rank, opType),
      opName_(std::move(opName)),
      device_(device),
      tensors_(std::move(tensors)),
      outputs_(std::move(outputs)),
      launch_(std::move(launch)),
      after_(std::move(after)),
      future_(c10::make_intrusive<c10::ivalue::Future>(c10::ListType::ofTensors(),
                                                       futureDevices(device))) {}

WorkOccl::~WorkOccl() {
  if (done_ != nullptr) (void)orEventDestroy(done_);
}

// An idle stream needs no gate: everything that produced the inputs has run. Recording one
// there would still cost a trip through the device's worker before the launch could proceed.
void WorkOccl::recordGate() {
  if (!device_.has_value()) return;
  {
    const DeviceScope scope(device_->index());
    OPENREG_CHECK(orEventCreateWithFlags(&done_, orEventDisableTiming));
  }
  OPENREG_CHECK(orEventRecordHost(done_));
  const OpenRegStream stream = getCurrentOpenRegStream(device_->index());
  if (taskActivityOn()) {
    const DeviceScope scope(device_->index());  // a NULL handle means the current device's
    activity_.begin(stream.stream(), activityName(opName_));
  }
  if (stream.query()) return;
  gate_.emplace(c10::DeviceType::PrivateUse1, c10::EventFlag::PYTORCH_DEFAULT);
  gate_->record(stream);
}

// [marker: occl-run]
bool WorkOccl::gateReached() const noexcept {
  try {
    return !gate_.has_value() || gate_->query();
  } catch (...) {
    return false;  // a failed input kernel: launch() reports it
  }
}

std::exception_ptr WorkOccl::launch() noexcept {
  try {
    if (gate_.has_value()) gate_->synchronize();
    activity_.start();
    glooWork_ = launch_();
    launch_ = nullptr;
    return nullptr;
  } catch (...) {
    return restated(opName_, device_, std::current_exception());
  }
}

void WorkOccl::failWith(std::exception_ptr error) noexcept {
  launch_ = nullptr;
  after_ = nullptr;
  complete(std::move(error));
}

// Gloo's Work is released with this one, never inside the callback: Gloo's future belongs to it.
// The callback reads the future, not the Work: Gloo completes its future before it marks its Work
// complete, so waiting on the Work there would wait for itself.
bool WorkOccl::completeOnGlooFuture() noexcept {
  if (!glooWork_) return false;
  c10::intrusive_ptr<c10::ivalue::Future> glooFuture;
  try {
    glooFuture = glooWork_->getFuture();
  } catch (const c10::Error&) {
    return false;  // this Gloo operation has no future (reduce_scatter_tensor's)
  }
  if (!glooFuture) return false;
  glooFuture->addCallback(
      [self = c10::intrusive_ptr<WorkOccl>::reclaim_copy(this)](c10::ivalue::Future& done) {
        self->finishAfterGloo(done.hasError() ? done.exception_ptr() : nullptr);
      });
  return true;
}

void WorkOccl::completeAfterGloo() noexcept {
  std::exception_ptr glooError;
  try {
    if (glooWork_) glooWork_->wait();
  } catch (...) {
    glooError = std::current_exception();
  }
  finishAfterGloo(glooError);
}

void WorkOccl::finishAfterGloo(std::exception_ptr glooError) noexcept {
  try {
    if (glooError) std::rethrow_exception(glooError);
    if (after_) after_();
  } catch (...) {
    failWith(restated(opName_, device_, std::current_exception()));
    return;
  }
  after_ = nullptr;  // drops the aliases it holds
  complete(nullptr);
}

void WorkOccl::complete(std::exception_ptr error) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tensors_.clear();
  }
  activity_.end(error != nullptr);
  // The Work first, then its future, then the stream: whoever one of them releases sees the ones
  // before it completed.
  finish(error);
  try {
    if (error) {
      future_->setError(error);
    } else {
      // No storages: the future records no event on the completing thread's stream. Gloo wrote
      // the outputs from the host before this point, so there is no device work to order after,
      // and an event there would keep the stream busy until the worker passed it, making the
      // next collective wait for a gate (see recordGate).
      future_->markCompleted(c10::IValue(outputs_),
                             std::vector<c10::ivalue::Future::WeakStorage>{});
    }
  } catch (...) {
    try {
      if (!future_->completed()) future_->setError(std::current_exception());
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing is left to report it to
    }
  }
  if (done_ != nullptr) {
    std::string message;
    if (error) {
      try {
        std::rethrow_exception(error);
      } catch (const c10::Error& e) {
        message = e.what_without_backtrace();
      } catch (const std::exception& e) {
        message = e.what();
      } catch (...) {
        message = "occl " + opName_ + " failed";
      }
    }
    // Never fails: the event is armed and only this call completes it.
    (void)orEventCompleteHost(done_, error ? message.c_str() : nullptr);
  }
}

// [marker: occl-wait]
void WorkOccl::orderCurrentStream() {
  const OpenRegStream stream = getCurrentOpenRegStream(device_->index());
  OPENREG_CHECK(orStreamWaitEvent(stream.stream(), done_, 0));
}

bool WorkOccl::wait(std::chrono::milliseconds timeout) {
  if (done_ != nullptr) {
    {
      // Already failed: raise here rather than leave the error to the stream's next sync.
      std::lock_guard<std::mutex> lock(mutex_);
      if (completed_ && exception_) std::rethrow_exception(exception_);
    }
    orderCurrentStream();
    if (timeout == ::kNoTimeout) return true;  // the stream waits; the host does not
  }
  return blockUntilDone(timeout);
}

bool WorkOccl::blockUntilDone(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (timeout == ::kNoTimeout) {
    cv_.wait(lock, [&] { return completed_; });
  } else if (!cv_.wait_for(lock, timeout, [&] { return completed_; })) {
    C10_THROW_ERROR(DistBackendError, "occl " + opName_ + ": wait() timed out after " +
                                          std::to_string(timeout.count()) +
                                          " ms; the collective is still running");
  }
  if (exception_) std::rethrow_exception(exception_);
  return true;
}

void WorkOccl::synchronize() {
  if (done_ != nullptr) {
    orderCurrentStream();
    return;
  }
  blockUntilDone(::kNoTimeout);
}

std::vector<at::Tensor> WorkOccl::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkOccl::getFuture() {
  return future_;
}

}  // namespace openreg::distributed
