#include "aten/engine/Ledger.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <atomic>
#include <string>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/Hooks.h"

namespace openreg::engine {
namespace {

std::atomic<int64_t> gCalls[kPathCount];
std::atomic<int64_t> gCopiedBytes{0};
std::atomic<int64_t> gMetaCalls{0};
std::atomic<int64_t> gCheckKernels{0};
thread_local int tPolicyOverride = -1;
thread_local int tServedCalls = 0;  // ServedCalls open on this thread

FallbackPolicy policyFromEnvironment() {
  const std::string value = configValue("OPENREG_FALLBACK");  // checked by the registry
  if (value == "warn") return FallbackPolicy::Warn;
  if (value == "error") return FallbackPolicy::Error;
  return FallbackPolicy::Allow;
}

// OPENREG_FALLBACK is configuration like the runtime's variables: a bad value fails the first use
// of a device (Hooks::init), not only a later copying fallback.
[[maybe_unused]] const bool kFallbackPolicyChecked =
    (registerInitCheck([] { fallbackPolicy(); }), true);

}  // namespace

const char* pathName(Path path) {
  static const char* names[kPathCount] = {"native", "async", "sync", "copying", "compiled"};
  return names[static_cast<int>(path)];
}

ServedCall::ServedCall() {
  ++tServedCalls;
}

ServedCall::~ServedCall() {
  --tServedCalls;
}

// [marker: count-native-once]
void count(Path path) {
  if (path == Path::Native && tServedCalls > 0) return;
  gCalls[static_cast<int>(path)].fetch_add(1, std::memory_order_relaxed);
}

void countCopiedBytes(int64_t bytes) {
  gCopiedBytes.fetch_add(bytes, std::memory_order_relaxed);
}

void countMetaCall() {
  gMetaCalls.fetch_add(1, std::memory_order_relaxed);
}

void countCheckKernel() {
  gCheckKernels.fetch_add(1, std::memory_order_relaxed);
}

PathCounts pathCounts() {
  PathCounts counts;
  for (int i = 0; i < kPathCount; ++i) counts.calls[i] = gCalls[i].load(std::memory_order_relaxed);
  counts.copiedBytes = gCopiedBytes.load(std::memory_order_relaxed);
  counts.metaCalls = gMetaCalls.load(std::memory_order_relaxed);
  counts.checkKernels = gCheckKernels.load(std::memory_order_relaxed);
  uint64_t synchronizations = 0;
  OPENREG_CHECK(orGetSynchronizationCount(&synchronizations));
  counts.synchronizations = static_cast<int64_t>(synchronizations);
  return counts;
}

FallbackPolicy fallbackPolicy() {
  if (tPolicyOverride >= 0) return static_cast<FallbackPolicy>(tPolicyOverride);
  static const FallbackPolicy fromEnvironment = policyFromEnvironment();
  return fromEnvironment;
}

int setThreadFallbackPolicy(int policy) {
  TORCH_CHECK(policy >= -1 && policy <= 2, OR_DEVICE_NAME ": invalid fallback policy ", policy);
  const int previous = tPolicyOverride;
  tPolicyOverride = policy;
  return previous;
}

// [marker: fallback-policy]
void checkCopyingFallback(const std::string& op, const std::string& why) {
  switch (fallbackPolicy()) {
    case FallbackPolicy::Allow:
      return;
    case FallbackPolicy::Warn:
      TORCH_WARN(OR_DEVICE_NAME ": ", op, " runs through the copying CPU fallback (", why,
                 "): its inputs are copied to the CPU and its results back.");
      return;
    case FallbackPolicy::Error:
      TORCH_CHECK_NOT_IMPLEMENTED(false, OR_DEVICE_NAME ": ", op,
                                  " would run through the copying CPU fallback (", why,
                                  ") and the fallback policy is 'error' (OPENREG_FALLBACK or "
                                  "torch.openreg.fallback_policy).");
  }
}

}  // namespace openreg::engine
