// Note [Allocator configuration] in AllocatorConfig.h.
#include "core/allocator/AllocatorConfig.h"

#include <c10/core/AllocatorConfig.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <mutex>
#include <string_view>
#include <utility>
#include <vector>

#include "core/Functions.h"

namespace openreg::allocator {
namespace {

constexpr std::string_view kShared = "PYTORCH_ALLOC_CONF";
constexpr std::string_view kOwn = "PYTORCH_OPENREG_ALLOC_CONF";

enum class Kind { Megabytes, Fraction, Bool, Divisions };

struct Key {
  std::string_view name;
  Kind kind;
  std::string_view accepts;
};

// The keys of c10's AcceleratorAllocatorConfig, every one of which openreg applies.
constexpr std::array<Key, 9> kKeys = {{
    {"max_split_size_mb", Kind::Megabytes, "a whole number of MiB"},
    {"max_non_split_rounding_mb", Kind::Megabytes, "a whole number of MiB, at least 20"},
    {"large_segment_size_mb", Kind::Megabytes, "a whole number of MiB, above 10"},
    {"garbage_collection_threshold", Kind::Fraction, "a number between 0 and 1, both excluded"},
    {"roundup_power2_divisions", Kind::Divisions,
     "a power of 2 (0: no rounding), or a list such as [256:4,1024:2,>:1] (sizes in MiB, each a "
     "power of 2)"},
    {"expandable_segments", Kind::Bool, "True or False"},
    {"pinned_use_background_threads", Kind::Bool, "True or False"},
    {"pinned_max_round_threshold_mb", Kind::Megabytes, "a whole number of MiB"},
    {"pinned_max_cached_size_mb", Kind::Megabytes, "a whole number of MiB"},
}};

// Keys only CUDA's (or ROCm's) allocator reads: left to it in the shared variable.
constexpr std::array<std::string_view, 8> kCudaOnly = {"backend",
                                                       "release_lock_on_cudamalloc",
                                                       "pinned_use_cuda_host_register",
                                                       "pinned_use_hip_host_register",
                                                       "pinned_num_register_threads",
                                                       "pinned_reserve_segment_size_mb",
                                                       "per_process_memory_fraction",
                                                       "graph_capture_record_stream_reuse"};

std::string acceptedKeys() {
  std::string names;
  for (const Key& key : kKeys) names += (names.empty() ? "" : ", ") + std::string(key.name);
  return names;
}

bool wholeNumber(std::string_view s) {
  return !s.empty() &&
         std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

bool validValue(const Key& key, std::string_view value) {
  switch (key.kind) {
    case Kind::Megabytes:
      return wholeNumber(value) && value.size() < 12;  // c10 checks each key's range
    case Kind::Bool:
      return value == "True" || value == "False";
    case Kind::Fraction: {
      char* end = nullptr;
      const std::string s(value);
      const double v = std::strtod(s.c_str(), &end);
      return !s.empty() && end == s.c_str() + s.size() && v > 0.0 && v < 1.0;
    }
    case Kind::Divisions: {
      auto powerOf2 = [](std::string_view s) {  // or 0
        if (!wholeNumber(s) || s.size() > 18) return false;
        const unsigned long long v = std::stoull(std::string(s));
        return (v & (v - 1)) == 0;
      };
      if (value.empty()) return false;
      if (value.front() != '[') return powerOf2(value);
      if (value.back() != ']') return false;
      std::string_view body = value.substr(1, value.size() - 2);
      while (!body.empty()) {
        const size_t comma = body.find(',');
        const std::string_view item = body.substr(0, comma);
        const size_t colon = item.find(':');
        if (colon == std::string_view::npos) return false;
        const std::string_view size = item.substr(0, colon);
        if (size != ">" && !powerOf2(size)) return false;
        if (!powerOf2(item.substr(colon + 1))) return false;
        body = comma == std::string_view::npos ? std::string_view() : body.substr(comma + 1);
      }
      return true;
    }
  }
  return false;
}

constexpr std::string_view kSetter = "torch.openreg.memory._set_allocator_settings";

// Refuses settings `text` from `source`: an environment variable, in the one format of an invalid
// value (refuseConfigValue), or the Python setter.
[[noreturn]] void refuse(std::string_view source, const std::string& text,
                         const std::string& reason) {
  TORCH_CHECK_VALUE(source != kSetter, OR_DEVICE_NAME ": ", source, "('", text, "'): ", reason);
  refuseConfigValue(std::string(source).c_str(), text, reason);
}

// "a:1,b:[x:1,y:2]" -> {(a, 1), (b, [x:1,y:2])}, commas inside brackets kept.
std::vector<std::pair<std::string, std::string>> split(std::string_view variable,
                                                       const std::string& settings) {
  std::vector<std::pair<std::string, std::string>> entries;
  std::string item;
  int depth = 0;
  auto flush = [&] {
    std::string entry;
    for (char c : item) {
      if (std::isspace(static_cast<unsigned char>(c)) == 0) entry += c;
    }
    item.clear();
    if (entry.empty()) return;
    const size_t colon = entry.find(':');
    if (colon == std::string::npos || colon == 0) {
      refuse(variable, settings,
             "'" + entry + "' is not key:value (as in CUDA's PYTORCH_ALLOC_CONF)");
    }
    entries.emplace_back(entry.substr(0, colon), entry.substr(colon + 1));
  };
  for (char c : settings) {
    depth += c == '[' ? 1 : c == ']' ? -1 : 0;
    if (c == ',' && depth == 0) {
      flush();
    } else {
      item += c;
    }
  }
  flush();
  return entries;
}

struct State {
  std::mutex mutex;
  bool loaded = false;
  std::map<std::string, std::string> settings;  // key -> value, what c10 was given last
};

State& state() {
  static auto* s = new State();  // never destroyed: read until the process ends
  return *s;
}

// Adds the entries of `text` (from `variable`) to `into`, refusing what openreg does not accept.
void merge(std::string_view variable, const std::string& text, bool shared,
           std::map<std::string, std::string>* into) {
  for (auto& [name, value] : split(variable, text)) {
    const auto key =
        std::find_if(kKeys.begin(), kKeys.end(), [&](const Key& k) { return k.name == name; });
    if (key == kKeys.end()) {
      const bool cuda = std::find(kCudaOnly.begin(), kCudaOnly.end(), name) != kCudaOnly.end();
      if (cuda && shared) continue;  // CUDA's to read
      refuse(
          variable, text,
          c10::str("unknown key '", name, "'", cuda ? " (it configures CUDA's allocator only)" : "",
                   "; openreg's allocator accepts ", acceptedKeys()));
    }
    if (!validValue(*key, value)) {
      refuse(variable, text,
             c10::str("'", name, ":", value, "' is not a valid value; ", name, " takes ",
                      key->accepts));
    }
    (*into)[name] = value;
  }
}

std::string joined(const std::map<std::string, std::string>& settings) {
  std::string text;
  for (const auto& [key, value] : settings) text += (text.empty() ? "" : ",") + key + ":" + value;
  return text;
}

// Hands the merged settings to c10 (which resets the keys a parse does not name: so it is always
// given all of them). Its own checks (the ranges of roundup_power2_divisions' sizes) name the
// variable too.
void applyToC10(std::string_view variable, const std::map<std::string, std::string>& settings) {
  try {
    c10::CachingAllocator::setAllocatorSettings(joined(settings));
  } catch (const c10::Error& e) {
    refuse(variable, joined(settings), e.what_without_backtrace());
  }
}

}  // namespace

void loadAllocatorConfig() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.loaded) return;
  std::map<std::string, std::string> settings;
  if (const std::string shared = configValue(std::string(kShared).c_str()); !shared.empty())
    merge(kShared, shared, /*shared=*/true, &settings);
  if (const std::string own = configValue(std::string(kOwn).c_str()); !own.empty())
    merge(kOwn, own, /*shared=*/false, &settings);
  applyToC10(settings.empty() ? kShared : kOwn, settings);
  s.settings = std::move(settings);
  s.loaded = true;
}

void setAllocatorSettings(const std::string& text) {
  loadAllocatorConfig();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  std::map<std::string, std::string> settings = s.settings;
  merge(kSetter, text, /*shared=*/false, &settings);
  applyToC10(kSetter, settings);
  s.settings = std::move(settings);
}

std::string allocatorSettings() {
  loadAllocatorConfig();
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return joined(s.settings);
}

}  // namespace openreg::allocator
