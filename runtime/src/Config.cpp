#include "Config.h"

#include <unistd.h>

#include <cstdint>
#include <type_traits>

#include "ConfigVariables.h"
#include "DeviceMemory.h"

namespace openreg {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

// Reads one variable through the registry (Note [Configuration variables]): an unset variable
// leaves `out` at its default. Returns false (and sets *error) when set but invalid.
template <class T>
bool read(const char* name, T& out, std::string* error) {
  const ConfigVariable* variable = findConfigVariable(name);
  const char* text = variable != nullptr ? environmentText(*variable) : nullptr;
  if (text == nullptr && variable != nullptr) text = variable->defaultValue;  // the registry's
  if (text == nullptr) return true;  // a computed default, set by the caller
  long long number = 0;
  int choice = 0;
  *error = parseConfigText(*variable, text, &number, &choice);
  if (!error->empty()) return false;
  if constexpr (std::is_same_v<T, bool>) {
    out = choice == 1;  // choices "0", "1"
  } else if constexpr (std::is_same_v<T, Config::OpenmpRelease>) {
    constexpr Config::OpenmpRelease kByChoice[] = {Config::OpenmpRelease::Never,
                                                   Config::OpenmpRelease::Always,
                                                   Config::OpenmpRelease::WhenAlone};
    out = kByChoice[choice];  // choices "0", "1", "auto"
  } else if constexpr (std::is_same_v<T, std::size_t>) {
    const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    out = static_cast<std::size_t>(number) / page * page;
  } else {
    out = static_cast<T>(number);
  }
  return true;
}

// [marker: address-space-budget]
// Each device maps its address space, 8 x its capacity, twice (Note [Device address space], Note
// [Reserved address ranges]). The user address space is 128 TiB with 4-level page tables; the
// devices may take half of it, leaving the rest to the process (and to a sanitizer's shadow
// memory): so count x capacity is at most 4 TiB. Checked with the configuration, so a
// configuration that cannot be set up fails at the first device query, before any device exists.
constexpr std::uint64_t kAddressSpaceBudget = std::uint64_t{64} << 40;

std::string checkAddressSpace(const Config& config) {
  const std::uint64_t needed =
      std::uint64_t{2} * static_cast<std::uint64_t>(config.deviceCount) *
      static_cast<std::uint64_t>(DeviceMemory::addressSpaceFor(config.deviceMemory));
  if (needed <= kAddressSpaceBudget) return {};
  const char* count = environmentText(*findConfigVariable("OPENREG_DEVICE_COUNT"));
  const char* memory = environmentText(*findConfigVariable("OPENREG_DEVICE_MEMORY"));
  return OR_DEVICE_NAME ": OPENREG_DEVICE_COUNT=" +
         (count != nullptr ? std::string(count) : std::to_string(config.deviceCount)) +
         " devices of OPENREG_DEVICE_MEMORY=" +
         (memory != nullptr ? std::string(memory) : std::to_string(config.deviceMemory)) +
         " need " + std::to_string(needed >> 40) + " TiB of address space (each device maps " +
         std::to_string(DeviceMemory::kAddressSpacePerCapacity) +
         " x its capacity of addresses twice: one capacity for orMalloc, the rest for "
         "reservations), more than the " +
         std::to_string(kAddressSpaceBudget >> 40) +
         " TiB the runtime may take: lower OPENREG_DEVICE_COUNT or OPENREG_DEVICE_MEMORY.";
}

}  // namespace

std::size_t defaultDeviceMemory() {
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  const long pages = sysconf(_SC_PHYS_PAGES);
  std::size_t quarter = pages > 0 ? static_cast<std::size_t>(pages) * page / 4 : 0;
  quarter = quarter / (2 * kMiB) * (2 * kMiB);
  return quarter < 256 * kMiB ? 256 * kMiB : quarter;
}

namespace {

// Each runtime variable and the field it sets, in the order they are read: one list for reading
// the environment and for reporting the values in effect. Stops when `f` returns false.
template <class C, class F>
bool forEachVariable(C& config, F&& f) {
  return f("OPENREG_DEVICE_COUNT", config.deviceCount) &&
         f("OPENREG_DEVICE_MEMORY", config.deviceMemory) &&
         f("OPENREG_STREAM_WORKERS", config.streamWorkers) &&
         f("OPENREG_WORKER_SPIN_US", config.workerSpinMicros) &&
         f("OPENREG_OPENMP_RELEASE_US", config.openmpReleaseMicros) &&
         f("OPENREG_OPENMP_RELEASE", config.openmpRelease) &&
         f("OPENREG_LAUNCH_BLOCKING", config.launchBlocking) &&
         f("OPENREG_FAULT_HANDLER", config.faultHandler) &&
         f("OPENREG_QUEUE_DEPTH", config.queueDepth);
}

template <class T>
std::string toText(const T& value) {
  if constexpr (std::is_same_v<T, bool>) {
    return value ? "1" : "0";
  } else if constexpr (std::is_same_v<T, Config::OpenmpRelease>) {
    return value == Config::OpenmpRelease::Never    ? "0"
           : value == Config::OpenmpRelease::Always ? "1"
                                                    : "auto";
  } else {
    return std::to_string(value);
  }
}

}  // namespace

std::string readConfigFromEnvironment(Config& out) {
  std::string error;
  out.deviceMemory = defaultDeviceMemory();
  const bool valid = forEachVariable(
      out, [&](const char* name, auto& field) { return read(name, field, &error); });
  return valid ? checkAddressSpace(out) : error;
}

bool configValueText(const Config& config, std::string_view name, std::string* text) {
  return !forEachVariable(config, [&](const char* variable, const auto& field) {
    if (name != variable) return true;
    *text = toText(field);
    return false;
  });
}

}  // namespace openreg
