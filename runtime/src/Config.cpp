#include "Config.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <limits>

#include "DeviceMemory.h"

namespace openreg {
namespace {

constexpr std::size_t kMiB = std::size_t{1} << 20;

std::string invalid(const char* name, const char* value, const char* accepted) {
  return std::string("openreg: invalid ") + name + "='" + value + "': expected " + accepted + ".";
}

// Reads an integer variable in [lo, hi]. Returns false (and sets *error) when set but invalid.
bool readInt(const char* name, long lo, long hi, int& out, std::string* error) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return true;
  char* end = nullptr;
  errno = 0;
  long parsed = std::strtol(value, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < lo || parsed > hi) {
    *error =
        invalid(name, value,
                ("an integer from " + std::to_string(lo) + " to " + std::to_string(hi)).c_str());
    return false;
  }
  out = static_cast<int>(parsed);
  return true;
}

bool readBool(const char* name, bool& out, std::string* error) {
  int v = out ? 1 : 0;
  if (!readInt(name, 0, 1, v, error)) return false;
  out = v != 0;
  return true;
}

// OPENREG_OPENMP_RELEASE: 0, 1 or auto.
bool readOpenmpRelease(Config::OpenmpRelease& out, std::string* error) {
  const char* name = "OPENREG_OPENMP_RELEASE";
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return true;
  const std::string v(value);
  if (v == "0") {
    out = Config::OpenmpRelease::Never;
  } else if (v == "1") {
    out = Config::OpenmpRelease::Always;
  } else if (v == "auto") {
    out = Config::OpenmpRelease::WhenAlone;
  } else {
    *error = invalid(name, value, "0, 1 or auto");
    return false;
  }
  return true;
}

// Accepts a byte count with an optional binary suffix: 536870912, 512M, 8G, 64K.
bool readBytes(const char* name, std::size_t& out, std::string* error) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return true;
  char* end = nullptr;
  errno = 0;
  unsigned long long parsed = std::strtoull(value, &end, 10);
  unsigned shift = 0;
  if (end != value) {
    switch (*end) {
      case 'k':
      case 'K':
        shift = 10;
        ++end;
        break;
      case 'm':
      case 'M':
        shift = 20;
        ++end;
        break;
      case 'g':
      case 'G':
        shift = 30;
        ++end;
        break;
      case 't':
      case 'T':
        shift = 40;
        ++end;
        break;
      default:
        break;
    }
  }
  const bool overflow =
      shift != 0 && parsed > (std::numeric_limits<unsigned long long>::max() >> shift);
  const unsigned long long bytes = overflow ? 0 : parsed << shift;
  // The upper bound keeps a device's two mappings well inside the 47-bit user address space.
  if (errno != 0 || end == value || *end != '\0' || overflow || bytes < kMiB ||
      bytes > (std::uint64_t{1} << 42)) {
    *error =
        invalid(name, value, "a byte count from 1M to 4T, optionally with a K, M, G or T suffix");
    return false;
  }
  const std::size_t page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
  out = static_cast<std::size_t>(bytes) / page * page;
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
  const char* count = std::getenv("OPENREG_DEVICE_COUNT");
  const char* memory = std::getenv("OPENREG_DEVICE_MEMORY");
  return "openreg: OPENREG_DEVICE_COUNT=" +
         (count != nullptr && *count != '\0' ? std::string(count)
                                             : std::to_string(config.deviceCount)) +
         " devices of OPENREG_DEVICE_MEMORY=" +
         (memory != nullptr && *memory != '\0' ? std::string(memory)
                                               : std::to_string(config.deviceMemory)) +
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

std::string readConfigFromEnvironment(Config& out) {
  std::string error;
  out.deviceMemory = defaultDeviceMemory();
  if (readInt("OPENREG_DEVICE_COUNT", 1, 64, out.deviceCount, &error) &&
      readBytes("OPENREG_DEVICE_MEMORY", out.deviceMemory, &error) &&
      readInt("OPENREG_STREAM_WORKERS", 1, 64, out.streamWorkers, &error) &&
      readInt("OPENREG_WORKER_SPIN_US", 0, 1000000, out.workerSpinMicros, &error) &&
      readInt("OPENREG_OPENMP_RELEASE_US", -1, 1000000000, out.openmpReleaseMicros, &error) &&
      readOpenmpRelease(out.openmpRelease, &error) &&
      readBool("OPENREG_LAUNCH_BLOCKING", out.launchBlocking, &error) &&
      readBool("OPENREG_FAULT_HANDLER", out.faultHandler, &error) &&
      readInt("OPENREG_QUEUE_DEPTH", 1, 1 << 24, out.queueDepth, &error)) {
    return checkAddressSpace(out);
  }
  return error;
}

}  // namespace openreg
