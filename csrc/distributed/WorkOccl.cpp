#include "distributed/WorkOccl.h"

#include <ATen/core/jit_type.h>
#include <c10/util/Exception.h>

#include <utility>

#include "core/Stream.h"

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

WorkOccl::~WorkOccl() = default;

void WorkOccl::recordGate() {
  if (!device_.has_value()) return;
  gate_.emplace(c10::DeviceType::PrivateUse1, c10::EventFlag::BACKEND_DEFAULT);
  gate_->record(getCurrentOpenRegStream(device_->index()));
}

// [marker: occl-run]
bool WorkOccl::launch() noexcept {
  try {
    if (gate_.has_value()) gate_->synchronize();
    glooWork_ = launch_();
    launch_ = nullptr;
    return true;
  } catch (...) {
    fail();
    return false;
  }
}

void WorkOccl::completeAfterGloo() noexcept {
  try {
    if (glooWork_) glooWork_->wait();
    glooWork_.reset();
    if (after_) after_();
  } catch (...) {
    fail();
    return;
  }
  after_ = nullptr;  // drops the aliases it holds
  complete(nullptr);
}

void WorkOccl::fail() noexcept {
  launch_ = nullptr;
  glooWork_.reset();
  after_ = nullptr;
  complete(restated(opName_, device_, std::current_exception()));
}

void WorkOccl::complete(std::exception_ptr error) noexcept {
  try {
    if (error) {
      future_->setError(error);
    } else {
      future_->markCompleted(c10::IValue(outputs_));
    }
  } catch (...) {
    if (!error) error = std::current_exception();
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tensors_.clear();
  }
  finish(error);
}

bool WorkOccl::wait(std::chrono::milliseconds timeout) {
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
  wait(::kNoTimeout);
}

std::vector<at::Tensor> WorkOccl::result() {
  return outputs_;
}

c10::intrusive_ptr<c10::ivalue::Future> WorkOccl::getFuture() {
  return future_;
}

}  // namespace openreg::distributed
