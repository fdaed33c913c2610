// The Kineto activity profiler of the openreg device: what torch.profiler records of the device.
//
// Note [Device activity in torch.profiler]
// PyTorch 2.13 forwards a factory registered with REGISTER_PRIVATEUSE1_PROFILER to Kineto when a
// profile with ProfilerActivity.PrivateUse1 starts. Kineto then asks it, per profile, for a
// session with the activity types requested, and drives it:
//  - start()/stop() around the profile: the session turns the runtime's task activity recording
//    on and off (Note [Task activity] in runtime/include/openreg/activity.hpp). stop() returns
//    once every task launched during the profile has run, so the trace holds all of them;
//  - pushCorrelationId/popCorrelationId on the thread running each recorded operator (the id is
//    the operator's FunctionEvent.id), and pushUserCorrelationId/popUserCorrelationId around each
//    record_function range: forwarded to the runtime's per-thread stack, so each task carries the
//    id of the innermost operator (or, outside any operator, range) that launched it;
//  - processTrace() after stop: one activity per task (kernel, copy, memset) on the row of its
//    stream, with its device start and end, linked to the launching operator (getLinkedActivity),
//    which is how key_averages() charges device time to that operator; and one launch activity
//    on the launching thread, at the launch, with a flow arrow to the task, as a CUDA trace has
//    cudaLaunchKernel.
// Rows: the trace's process is the device index, its thread a row per stream, named with the
// stream's id (Note [OpenReg stream ids]: 0 for the default stream). Kineto's resource ids are
// 32-bit and stream ids are not, so rows are numbered per profile: 0 for the default stream,
// then 1, 2, ... in order of first use.
// A profile that does not ask for device activity (CPU only) gets a session that does nothing:
// no recording, no correlation stack, so launches cost what they cost without a profiler.
// Kernels launched by an operator are named "<operator> kernel" (a kernel named as its operator
// would be summed with it in key_averages()); copies and memsets by the runtime ("Memcpy HtoD").
#include <openreg/runtime.h>
#include <openreg/activity.hpp>

// The order matters: IActivityProfiler.h only declares CpuTraceBuffer, which libkineto.h defines.
#include <libkineto.h>
#include <output_base.h>
#include <torch/csrc/profiler/standalone/privateuse1_profiler.h>

#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace openreg {
namespace {

using libkineto::ActivityType;

const std::set<ActivityType>& deviceActivityTypes() {
  static const std::set<ActivityType> types = {ActivityType::CONCURRENT_KERNEL,
                                               ActivityType::GPU_MEMCPY, ActivityType::GPU_MEMSET,
                                               ActivityType::PRIVATEUSE1_RUNTIME};
  return types;
}

ActivityType typeOf(orTaskKind kind) {
  switch (kind) {
    case orTaskKindMemcpy:
      return ActivityType::GPU_MEMCPY;
    case orTaskKindMemset:
      return ActivityType::GPU_MEMSET;
    case orTaskKindKernel:
      break;
  }
  return ActivityType::CONCURRENT_KERNEL;
}

const char* launchName(orTaskKind kind) {
  switch (kind) {
    case orTaskKindMemcpy:
      return "orMemcpyAsync";
    case orTaskKindMemset:
      return "orMemsetAsync";
    case orTaskKindKernel:
      break;
  }
  return OR_DEVICE_NAME "::launch";
}

// The handle of each device's default stream, whose c10 stream id is 0.
std::uint64_t defaultStreamHandle(int device) {
  orStream_t stream = nullptr;
  if (orDeviceGetDefaultStream(device, &stream) != orSuccess) return 0;
  return reinterpret_cast<std::uint64_t>(stream);
}

// [marker: activity-session]
class ActivitySession final : public libkineto::IActivityProfilerSession {
 public:
  explicit ActivitySession(const std::set<ActivityType>& requested) {
    for (ActivityType type : requested) {
      if (deviceActivityTypes().count(type) != 0) wanted_.insert(type);
    }
    // A CPU-only profile asks for PRIVATEUSE1_RUNTIME too (PyTorch 2.13 requests the host-side
    // runtime types of every backend): launches alone are not device activity.
    if (wanted_.count(ActivityType::CONCURRENT_KERNEL) == 0 &&
        wanted_.count(ActivityType::GPU_MEMCPY) == 0 &&
        wanted_.count(ActivityType::GPU_MEMSET) == 0) {
      wanted_.clear();
    }
  }

  // A session Kineto drops without stopping it must not leave the runtime timing every launch.
  ~ActivitySession() override {
    if (recording_) endTaskActivity();
  }

  void start() override {
    if (wanted_.empty()) return;
    recording_ = beginTaskActivity();
    if (!recording_) {
      errors_.emplace_back(OR_DEVICE_NAME
                           ": another profile is recording the device; this one records no device "
                           "activity. Stop the other profile first.");
    }
    status_ = libkineto::TraceStatus::RECORDING;
  }

  void stop() override {
    if (recording_) tasks_ = endTaskActivity();
    recording_ = false;
    status_ = libkineto::TraceStatus::PROCESSING;
  }

  std::vector<std::string> errors() override { return errors_; }

  void pushCorrelationId(uint64_t id) override {
    if (!wanted_.empty()) pushLaunchCorrelation(id);
  }
  void popCorrelationId() override {
    if (!wanted_.empty()) popLaunchCorrelation();
  }
  // A record_function range: its id goes on the same stack, so work launched inside the range
  // but outside any operator (torch.openreg._sleep, a raw launch) is charged to the range.
  // PyTorch draws user and operator ids from one counter.
  void pushUserCorrelationId(uint64_t id) override {
    if (!wanted_.empty()) pushLaunchCorrelation(id);
  }
  void popUserCorrelationId() override {
    if (!wanted_.empty()) popLaunchCorrelation();
  }

  void processTrace(libkineto::ActivityLogger& logger) override {
    processTrace(
        logger, [](int32_t) -> const libkineto::ITraceActivity* { return nullptr; }, 0, 0);
  }

  // [marker: process-trace]
  void processTrace(libkineto::ActivityLogger& logger,
                    libkineto::getLinkedActivityCallback getLinkedActivity, int64_t startTime,
                    int64_t endTime) override {
    span_ = std::make_unique<libkineto::TraceSpan>(startTime, endTime, OR_DEVICE_NAME);
    const bool launches = wanted_.count(ActivityType::PRIVATEUSE1_RUNTIME) != 0;
    uint32_t nextFlow = 1;
    for (const TaskActivity& task : tasks_) {
      const ActivityType type = typeOf(task.kind);
      if (wanted_.count(type) == 0) continue;
      // Kineto's correlation ids are 32-bit; PyTorch's count up from 1 per process.
      const auto correlation = static_cast<int32_t>(task.correlation);
      const libkineto::ITraceActivity* linked =
          task.correlation != 0 ? getLinkedActivity(correlation) : nullptr;
      std::string name;
      if (task.name != nullptr) {
        name = task.name;
      } else {
        name =
            linked != nullptr ? linked->name() + " kernel" : std::string(OR_DEVICE_NAME " kernel");
      }
      auto& activity = activities_.emplace_back(*span_, type, name);
      activity.startTime = task.startNs;
      activity.endTime = task.endNs;
      activity.id = correlation;
      activity.device = task.device;
      activity.resource = rowOf(task.device, task.stream);
      activity.threadId = activity.resource;
      activity.linked = linked;
      activity.addMetadata("stream", streamId(task.device, task.stream));
      activity.addMetadata("correlation", correlation);
      if (task.failed) activity.addMetadata("failed", 1);
      if (launches) {
        auto& launch = activities_.emplace_back(*span_, ActivityType::PRIVATEUSE1_RUNTIME,
                                                launchName(task.kind));
        launch.startTime = launch.endTime = task.launchNs;
        launch.id = correlation;
        launch.device = static_cast<int32_t>(::getpid());  // the host process's row, as CPU ops
        launch.resource = static_cast<int32_t>(task.launchThread);
        launch.threadId = static_cast<int32_t>(task.launchThread);
        launch.linked = linked;
        launch.flow.id = nextFlow;
        launch.flow.type = libkineto::kLinkAsyncCpuGpu;
        launch.flow.start = true;
        launch.addMetadata("correlation", correlation);
        activity.flow.id = nextFlow;
        activity.flow.type = libkineto::kLinkAsyncCpuGpu;
        activity.flow.start = false;
        ++nextFlow;
      }
    }
    for (const auto& [device, streams] : rows_) {
      logger.handleDeviceInfo(
          libkineto::DeviceInfo{device, device, OR_DEVICE_NAME ":" + std::to_string(device),
                                OR_DEVICE_NAME " device " + std::to_string(device)},
          startTime);
      for (const auto& [handle, row] : streams) {
        logger.handleResourceInfo(
            libkineto::ResourceInfo{row, row, device, "stream " + streamId(device, handle)},
            startTime);
      }
    }
    for (const auto& activity : activities_) activity.log(logger);
  }

  // Devices and rows are given to the logger in processTrace, one per device seen.
  std::unique_ptr<libkineto::DeviceInfo> getDeviceInfo() override { return nullptr; }
  std::vector<libkineto::ResourceInfo> getResourceInfos() override { return {}; }
  std::unique_ptr<libkineto::CpuTraceBuffer> getTraceBuffer() override { return nullptr; }

 private:
  int32_t rowOf(int device, std::uint64_t handle) {
    auto& streams = rows_[device];
    const auto found = streams.find(handle);
    if (found != streams.end()) return found->second;
    int32_t row =
        handle == defaultStreamHandle(device) ? 0 : static_cast<int32_t>(++lastRow_[device]);
    streams.emplace(handle, row);
    return row;
  }

  static std::string streamId(int device, std::uint64_t handle) {
    return std::to_string(handle == defaultStreamHandle(device) ? 0 : handle);
  }

  std::set<ActivityType> wanted_;
  bool recording_ = false;
  std::vector<std::string> errors_;
  std::vector<TaskActivity> tasks_;
  std::unique_ptr<libkineto::TraceSpan> span_;
  // Kineto keeps pointers to logged activities until the session is destroyed.
  std::deque<libkineto::GenericTraceActivity> activities_;
  std::map<int, std::map<std::uint64_t, int32_t>> rows_;  // device -> stream handle -> row
  std::map<int, int> lastRow_;
};

class ActivityProfiler final : public libkineto::IActivityProfiler {
 public:
  const std::string& name() const override { return name_; }
  const std::set<ActivityType>& availableActivities() const override {
    return deviceActivityTypes();
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      const std::set<ActivityType>& activityTypes, const libkineto::Config& /*config*/) override {
    return std::make_unique<ActivitySession>(activityTypes);
  }
  std::unique_ptr<libkineto::IActivityProfilerSession> configure(
      int64_t /*tsMs*/, int64_t /*durationMs*/, const std::set<ActivityType>& activityTypes,
      const libkineto::Config& config) override {
    return configure(activityTypes, config);
  }

 private:
  std::string name_ = OR_DEVICE_NAME;
};

// [marker: register-activity-profiler]
REGISTER_PRIVATEUSE1_PROFILER(ActivityProfiler);

}  // namespace
}  // namespace openreg
