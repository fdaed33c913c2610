// The runtime's configuration, read once from the environment at initialization, through the
// registry of variables (Note [Configuration variables] in ConfigVariables.h); invalid values fail
// initialization with a message naming the variable (orErrorInitializationError), never a silent
// default. Every field's default is the registry's, applied by readConfigFromEnvironment.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace openreg {

struct Config {
  int deviceCount = 0;           // OPENREG_DEVICE_COUNT
  std::size_t deviceMemory = 0;  // OPENREG_DEVICE_MEMORY, bytes per device
  int streamWorkers = 0;         // OPENREG_STREAM_WORKERS, worker threads per device
  int workerSpinMicros = 0;      // OPENREG_WORKER_SPIN_US, busy-wait before a worker or sync sleeps
  bool launchBlocking = false;   // OPENREG_LAUNCH_BLOCKING, every launch completes before returning
  bool faultHandler = false;     // OPENREG_FAULT_HANDLER, report host access to device memory
  int queueDepth = 0;  // OPENREG_QUEUE_DEPTH, operations a stream holds before the host waits
  // OPENREG_OPENMP_RELEASE_US: idle time after which a worker's OpenMP helpers end, -1 never
  int openmpReleaseMicros = 0;
  // OPENREG_OPENMP_RELEASE: 0, 1 or auto, whether threads release them (OpenMpThreads.h)
  enum class OpenmpRelease { Never, Always, WhenAlone };
  OpenmpRelease openmpRelease = OpenmpRelease::Never;
};

// Parses the environment into `out`. Returns "" on success, else a message naming the variable,
// the value and what is accepted.
std::string readConfigFromEnvironment(Config& out);

// The value of the runtime's variable `name` in `config`, as text ("6442450944", "auto", "1").
// False when `name` is not one of the runtime's variables.
bool configValueText(const Config& config, std::string_view name, std::string* text);

// Default device capacity: a quarter of physical memory, at least 256 MiB, page aligned.
std::size_t defaultDeviceMemory();

}  // namespace openreg
