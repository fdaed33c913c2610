// runtime_fuzz: random call sequences over the whole C API, from several threads at once, with
// valid, invalid and stale arguments. See "The fuzzer" in docs/runtime.md.
//
//   runtime_fuzz [--seconds S] [--seed N] [--threads T]      (FUZZ_SECONDS, FUZZ_SEED also work)
//
// Each round starts T threads; thread t of round r draws its calls from the seed N + r * 1000 + t,
// so a failure names the seed that replays its call sequence (the interleaving of the threads is
// the scheduler's). Invariants checked:
//  - every call returns a code its comment in runtime.h documents, and the one the arguments call
//    for where they decide it (a stale handle, a NULL out-pointer, a double free, a bad enum);
//  - a failing call sets a message of its own, "openreg: <call>: ..." (a task failure: the task's
//    message), never an older one: before every call the thread provokes a sentinel failure; a
//    successful call leaves the message alone;
//  - device memory holds what the calls wrote: each allocation has a host shadow, work on
//    different streams touching one allocation is ordered with events, as a correct program
//    must, and every synchronous read is compared with the shadow; fresh memory reads as zeros;
//  - synchronizing calls inside a task return orErrorNotPermitted; every counting task runs once;
//  - after each round, with everything freed, orMemGetInfo is back to its baseline, task errors
//    are reported once, and no thread was left behind;
//  - no crash (the sanitizers' trees run it too) and no hang: a watchdog ends the process if a
//    thread makes no progress for a minute.
// Wild host pointers are limited to the ones the runtime documents as handled: the copies' host
// side may be 0x10 or an inaccessible page (Note [Fault-guarded copies]); other calls receive
// wild pointers only where they are never dereferenced (frees, attribute queries).
#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <openreg/runtime.h>
#include <openreg/task.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <random>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "ProcessInfo.h"

extern "C" {  // FuzzCCalls.c
const char* fuzzErrorName(int code);
const char* fuzzErrorString(int code);
orError_t fuzzMemcpyWithKind(void* dst, const void* src, size_t count, int kind);
orError_t fuzzActivitySetLabelWithKind(int kind);
orError_t fuzzMemcpyAsyncWithKind(void* dst, const void* src, size_t count, int kind,
                                  orStream_t stream);
}

namespace {

using Clock = std::chrono::steady_clock;

// ------------------------------------------------------------------------------------------------
// What runtime.h documents: the codes each function may return besides orSuccess.
// ------------------------------------------------------------------------------------------------
constexpr unsigned bit(orError_t e) {
  return 1u << static_cast<unsigned>(e);
}
constexpr unsigned kValue = bit(orErrorInvalidValue);
constexpr unsigned kHandle = bit(orErrorInvalidResourceHandle);
constexpr unsigned kDevice = bit(orErrorInvalidDevice);
constexpr unsigned kPointer = bit(orErrorInvalidDevicePointer);
constexpr unsigned kLaunch = bit(orErrorLaunchFailure);
constexpr unsigned kNotReady = bit(orErrorNotReady);
constexpr unsigned kMemory = bit(orErrorMemoryAllocation);
constexpr unsigned kNotPermitted = bit(orErrorNotPermitted);
constexpr unsigned kDirection = bit(orErrorInvalidMemcpyDirection);
constexpr unsigned kCaptureUnsupported = bit(orErrorStreamCaptureUnsupported);
constexpr unsigned kCaptureInvalidated = bit(orErrorStreamCaptureInvalidated);

struct Documented {
  const char* name;
  unsigned codes;
};
// Every synchronizing call may be refused inside a task and may report a task's failure.
constexpr unsigned kSync = kLaunch | kNotPermitted;
constexpr Documented kDocumented[] = {
    {"orInit", kValue},
    {"orRuntimeGetVersion", kValue},
    {"orGetDeviceCount", kValue},
    {"orSetDevice", kDevice},
    {"orGetDevice", kValue},
    {"orGetDeviceProperties", kValue | kDevice},
    {"orDeviceSynchronize", kSync},
    {"orMemGetInfo", kValue},
    {"orDeviceGetStreamPriorityRange", 0},
    {"orStreamCreate", kValue | kMemory},
    {"orStreamCreateWithPriority", kValue | kMemory},
    {"orStreamGetPriority", kValue | kHandle},
    {"orDeviceGetDefaultStream", kValue | kDevice},
    {"orStreamGetDevice", kValue | kHandle},
    {"orStreamDestroy", kHandle | kNotPermitted},
    {"orStreamQuery", kNotReady | kHandle | kLaunch},
    {"orStreamSynchronize", kHandle | kSync},
    {"orStreamWaitEvent", kValue | kHandle},
    {"orLaunchHostFunc", kValue | kHandle | kLaunch},
    {"orLaunchTask", kValue | kHandle | kNotPermitted | kCaptureUnsupported | kLaunch},
    {"orGetLastErrorCategory", kValue},
    {"orCheckHostAccesses", kValue | kLaunch},
    {"orActivitySetLabel", kValue},
    {"orEventCreate", kValue | kMemory},
    {"orEventCreateWithFlags", kValue | kMemory},
    {"orEventRecord", kHandle},
    {"orEventQuery", kNotReady | kHandle | kLaunch},
    {"orEventSynchronize", kHandle | kNotPermitted | kLaunch},
    {"orEventElapsedTime", kValue | kNotReady | kHandle},
    {"orEventDestroy", kHandle},
    {"orMalloc", kValue | kMemory},
    {"orFree", kPointer | kNotPermitted},
    {"orMallocHost", kValue | kMemory},
    {"orFreeHost", kValue | kNotPermitted},
    {"orPointerGetAttributes", kValue | kPointer},
    {"orMemcpy", kValue | kDirection | kSync},
    {"orMemcpyAsync", kValue | kDirection | kHandle | kSync},
    {"orMemsetAsync", kValue | kPointer | kHandle | kLaunch},
    {"orMemset", kValue | kPointer | kSync},
    {"orGetKernelPointer", kValue | kPointer},
    {"orIpcGetMemHandle", kValue | kPointer | kMemory},
    {"orIpcOpenMemHandle", kValue | kDevice | kMemory},
    {"orIpcCloseMemHandle", kPointer | kMemory | kNotPermitted},
    {"orIpcDiscardMemHandle", kValue | kNotPermitted},
    {"orIpcMemHandleQuery", kValue | kNotReady},
    {"orIpcGetMemHandleInfo", kValue},
    {"orStreamBeginCapture", kValue | kHandle | kNotPermitted},
    {"orStreamEndCapture", kValue | kHandle | kNotPermitted | kCaptureInvalidated | kMemory},
    {"orStreamGetCaptureInfo", kValue | kHandle},
    {"orGraphGetInfo", kHandle},
    {"orGraphInstantiate", kValue | kHandle | kMemory},
    {"orGraphLaunch", kHandle | kCaptureUnsupported | kLaunch},
    {"orGraphDestroy", kHandle},
    {"orGraphExecDestroy", kHandle},
    {"orMemGetAllocationGranularity", kValue},
    {"orMemAddressReserve", kValue | kMemory},
    {"orMemAddressFree", kValue},
    {"orMemMap", kValue | kMemory},
    {"orMemUnmap", kValue},
};

unsigned documentedCodes(const char* name) {
  for (const Documented& d : kDocumented) {
    if (std::strcmp(d.name, name) == 0) return d.codes;
  }
  std::fprintf(stderr, "runtime_fuzz: %s is not in the table of documented codes\n", name);
  std::_Exit(2);
}

// ------------------------------------------------------------------------------------------------
// Shared state: configuration, counters, the watchdog's view, failure reporting.
// ------------------------------------------------------------------------------------------------
struct Shared {
  int devices = 0;
  std::size_t capacity = 0;
  bool launchBlocking = false;
  // PROT_NONE pages, one per fuzzing thread: documented-handled wild host pointers.
  std::vector<void*> noAccessPages;
  std::string sentinel;  // the message of the sentinel failure
  // Frees that are then misused (double frees) hold this exclusively; every allocation holds it
  // shared, so no other thread can be handed the freed address in between.
  std::shared_mutex reuse;
  std::atomic<long> calls{0};
  std::atomic<long> throwingTasks{0};
  std::atomic<bool> failed{false};
  std::mutex reportMutex;
};
Shared gShared;

void* const kWildHost = reinterpret_cast<void*>(0x10);
// ThreadSanitizer records a memmove's whole range before the copy faults, so two threads' faulting
// copies at 0x10 look like a race to it: under TSan each thread uses only its own wild page.
#if defined(__SANITIZE_THREAD__)
constexpr bool kSharedWildPointer = false;
#else
constexpr bool kSharedWildPointer = true;
#endif
const bool kTrace = std::getenv("FUZZ_TRACE") != nullptr;

// Per-thread progress for the watchdog.
struct Progress {
  std::atomic<long> calls{0};
  std::atomic<const char*> current{"(not started)"};
  std::atomic<unsigned long> seed{0};
  std::atomic<bool> active{false};
};

[[noreturn]] void die(const std::string& what) {
  std::lock_guard<std::mutex> lock(gShared.reportMutex);
  std::fprintf(stderr, "runtime_fuzz: FAILED: %s\n", what.c_str());
  std::fflush(stderr);
  std::_Exit(1);
}

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool isFailure(orError_t e) {
  return e != orSuccess && e != orErrorNotReady;
}

// ------------------------------------------------------------------------------------------------
// One fuzzing thread.
// ------------------------------------------------------------------------------------------------
struct Alloc {
  char* ptr = nullptr;
  std::size_t size = 0;
  int device = 0;
  bool tracked = true;               // has a shadow (large allocations do not)
  std::vector<std::uint8_t> shadow;  // what the device memory holds
  orStream_t pending = nullptr;      // the last stream whose work touched it, null when settled
  std::vector<std::string> history;  // with FUZZ_TRACE=1: what touched it
};

struct Pinned {
  char* ptr = nullptr;
  std::size_t size = 0;
  bool source = false;           // sources are never written after creation; sinks are never read
  orStream_t pending = nullptr;  // sinks: the last stream whose copy writes it, null when settled
};

struct FuzzStream {
  orStream_t handle = nullptr;
  int device = 0;
};

struct FuzzEvent {
  orEvent_t handle = nullptr;
  int device = 0;
};

class Fuzzer {
 public:
  Fuzzer(unsigned long seed, Progress& progress, void* noAccessPage)
      : rng_(seed), seed_(seed), progress_(progress), noAccessPage_(noAccessPage) {}

  void run(Clock::time_point until, long maxOps) {
    progress_.seed.store(seed_);
    progress_.active.store(true);
    setUp();
    for (long i = 0; i < maxOps && Clock::now() < until && !gShared.failed.load(); ++i) {
      op_ = i;
      step();
    }
    tearDown();
    progress_.active.store(false);
  }

 private:
  // --- the call wrapper and its invariants ------------------------------------------------------
  template <class F>
  orError_t call(const char* name, unsigned allowed, F&& f) {
    progress_.current.store(name);
    orSetDevice(-777);  // the sentinel failure: its message must not survive a failing call
    const orError_t e = f();
    progress_.calls.fetch_add(1, std::memory_order_relaxed);
    gShared.calls.fetch_add(1, std::memory_order_relaxed);
    const char* message = orGetLastErrorMessage();
    if (message == nullptr) fault(name, e, "orGetLastErrorMessage returned NULL");
    const bool isSentinel = gShared.sentinel == message;
    if (e != orSuccess && (allowed & bit(e)) == 0) fault(name, e, "unexpected code");
    if (e != orSuccess && (documentedCodes(name) & bit(e)) == 0) {
      fault(name, e, "a code its comment in runtime.h does not document");
    }
    if (!isFailure(e)) {
      if (!isSentinel) fault(name, e, "a call that did not fail changed the message");
    } else if (isSentinel) {
      fault(name, e, "the call failed without setting a message");
    } else if (e == orErrorLaunchFailure) {
      if (std::strstr(message, "a task failed on device") == nullptr) {
        fault(name, e, "a launch failure without the task's message");
      }
      if (gShared.throwingTasks.load() == 0) fault(name, e, "a launch failure no task caused");
    } else if (std::strncmp(message, "openreg: ", 9) != 0 ||
               std::strncmp(message + 9, name, std::strlen(name)) != 0 ||
               message[9 + std::strlen(name)] != ':') {
      fault(name, e, "the message does not name the call");
    }
    return e;
  }

  [[noreturn]] void fault(const char* name, orError_t e, const char* what) {
    die(std::string(what) + ": " + name + " returned " + orGetErrorName(e) + " (message: \"" +
        orGetLastErrorMessage() + "\"), thread seed " + std::to_string(seed_) + ", operation " +
        std::to_string(op_) + ", " + context_);
  }

  // readBack_ holds a's bytes from `offset` on, and they differ from the shadow.
  [[noreturn]] void mismatch(const Alloc& a, std::size_t offset) {
    std::size_t i = 0;
    while (readBack_[i] == a.shadow[offset + i]) ++i;
    std::string history;
    for (const std::string& h : a.history) history += "\n    " + h;
    die("device memory does not hold what was written: " + context_ + ", allocation of " +
        std::to_string(a.size) + " bytes at " + hex(a.ptr) + " on device " +
        std::to_string(a.device) + ", first difference at offset " + std::to_string(offset + i) +
        " (read " + std::to_string(readBack_[i]) + ", expected " +
        std::to_string(a.shadow[offset + i]) + "), thread seed " + std::to_string(seed_) +
        ", operation " + std::to_string(op_) +
        (history.empty() ? ", FUZZ_TRACE=1 shows its history" : ", history:" + history));
  }

  void note(Alloc& a, const std::string& what) {
    if (kTrace) a.history.push_back("op " + std::to_string(op_) + ": " + what);
  }

  // --- random choices
  // -----------------------------------------------------------------------------
  std::size_t below(std::size_t n) { return n == 0 ? 0 : rng_() % n; }
  bool chance(int percent) { return static_cast<int>(rng_() % 100) < percent; }
  template <class T>
  T& pick(std::vector<T>& v) {
    return v[below(v.size())];
  }

  std::size_t allocationSize() {
    switch (below(8)) {
      case 0:
        return 1 + below(64);
      case 1:
        return 4095 + below(3);
      case 2:
        return 1 + below(1 << 20);
      default:
        return 1 + below(64 << 10);
    }
  }

  int badDevice() {
    const int choices[] = {-1, gShared.devices, INT_MAX, INT_MIN, gShared.devices + 7};
    return choices[below(5)];
  }

  orStream_t garbageStream() {
    // Never a live handle, even another thread's: slot 0 with generation 0, which no handle has;
    // slot indices past any table; and no slot at all.
    const std::uint64_t choices[] = {0xdeadbeefULL, ~0ULL, std::uint64_t{1} << 32,
                                     (rng_() | (std::uint64_t{1} << 62)) & ~0xffffffffULL};
    return reinterpret_cast<orStream_t>(choices[below(4)]);
  }

  orStream_t staleOrGarbageStream() {
    if (!staleStreams_.empty() && chance(70)) return pick(staleStreams_);
    return garbageStream();
  }

  orEvent_t staleOrGarbageEvent() {
    if (!staleEvents_.empty() && chance(70)) return pick(staleEvents_);
    if (chance(30)) return nullptr;
    return reinterpret_cast<orEvent_t>(garbageStream());
  }

  // A live stream to run work on: one of ours, a default stream, or NULL (the current device's
  // default stream). *identity is the handle that names it for ordering.
  orStream_t liveStream(orStream_t* identity, int* device) {
    const std::size_t n = below(streams_.size() + 2);
    if (n < streams_.size()) {
      *identity = streams_[n].handle;
      *device = streams_[n].device;
      return streams_[n].handle;
    }
    if (n == streams_.size()) {
      *device = static_cast<int>(below(gShared.devices));
      *identity = defaults_[*device];
      return *identity;
    }
    *device = current_;
    *identity = defaults_[current_];
    return nullptr;
  }

  int deviceOfStream(orStream_t s) {
    for (int d = 0; d < gShared.devices; ++d) {
      if (defaults_[d] == s) return d;
    }
    for (const FuzzStream& f : streams_) {
      if (f.handle == s) return f.device;
    }
    die("internal: pending stream not found");
  }

  unsigned launchCodes() const { return gShared.launchBlocking ? kLaunch : 0; }

  // --- ordering: what a correct program does between streams ------------------------------------
  // Work about to run on `target` that touches `a` must come after the work already queued that
  // touched it on another stream: record an event there and make `target` wait for it.
  void orderAfter(orStream_t target, Alloc& a) {
    if (a.pending == nullptr || a.pending == target) return;
    note(a, "ordered: " + hex(target) + " waits for " + hex(a.pending));
    orderAfter(target, a.pending);
  }

  // The same for a pinned sink: two asynchronous copies into it on different streams would race.
  void orderAfter(orStream_t target, Pinned& p) {
    if (p.pending != nullptr && p.pending != target) orderAfter(target, p.pending);
  }

  void orderAfter(orStream_t target, orStream_t pending) {
    const int d = deviceOfStream(pending);
    call("orEventRecord", 0, [&] { return orEventRecord(orderEvents_[d], pending); });
    call("orStreamWaitEvent", 0, [&] { return orStreamWaitEvent(target, orderEvents_[d], 0); });
  }

  void settle() {
    const int saved = current_;
    for (int d = 0; d < gShared.devices; ++d) {
      setDevice(d);
      call("orDeviceSynchronize", kLaunch, [] { return orDeviceSynchronize(); });
    }
    setDevice(saved);
    for (Alloc& a : allocs_) a.pending = nullptr;
    for (Pinned& p : pinned_) p.pending = nullptr;
  }

  void setDevice(int d) {
    call("orSetDevice", 0, [d] { return orSetDevice(d); });
    current_ = d;
  }

  // --- set-up and tear-down
  // -----------------------------------------------------------------------
  void setUp() {
    call("orGetDevice", 0, [&] { return orGetDevice(&current_); });
    defaults_.resize(gShared.devices);
    orderEvents_.resize(gShared.devices);
    const int saved = current_;
    for (int d = 0; d < gShared.devices; ++d) {
      call("orDeviceGetDefaultStream", 0,
           [&] { return orDeviceGetDefaultStream(d, &defaults_[d]); });
      setDevice(d);
      call("orEventCreateWithFlags", 0,
           [&] { return orEventCreateWithFlags(&orderEvents_[d], orEventDisableTiming); });
    }
    setDevice(saved);
    scratch_.resize(1 << 20);
    readBack_.resize(1 << 20);
  }

  void tearDown() {
    settle();
    settle();  // tasks launched by tasks (onto device 0) during the first pass
    for (Alloc& a : allocs_) {
      call("orFree", kLaunch, [&] { return orFree(a.ptr); });
    }
    allocs_.clear();
    // Handles still out keep their (freed, retired) allocations: give them back, so the round
    // ends with every byte free.
    for (const orIpcMemHandle_t& h : handles_) {
      call("orIpcDiscardMemHandle", 0, [&] { return orIpcDiscardMemHandle(h); });
    }
    handles_.clear();
    releaseReservation();
    for (Pinned& p : pinned_) {
      call("orFreeHost", kLaunch, [&] { return orFreeHost(p.ptr); });
    }
    pinned_.clear();
    for (FuzzStream& s : streams_) {
      call("orStreamDestroy", 0, [&] { return orStreamDestroy(s.handle); });
    }
    streams_.clear();
    for (FuzzEvent& e : events_) {
      call("orEventDestroy", 0, [&] { return orEventDestroy(e.handle); });
    }
    events_.clear();
    for (orEvent_t e : orderEvents_) {
      call("orEventDestroy", 0, [&] { return orEventDestroy(e); });
    }
    settle();
    const long launched = counted_.launched.load();
    const long ran = counted_.ran.load();
    if (launched != ran) {
      die("counting tasks: " + std::to_string(launched) + " launched, " + std::to_string(ran) +
          " ran (thread seed " + std::to_string(seed_) + ")");
    }
    if (counted_.inTaskViolations.load() != 0) {
      die("a synchronizing call inside a task did not return orErrorNotPermitted: " +
          counted_.inTaskReport + " (thread seed " + std::to_string(seed_) + ")");
    }
  }

  // --- operations
  // ---------------------------------------------------------------------------------
  void step() {
    context_.clear();
    switch (below(30)) {
      case 0:
      case 1:
        return opMalloc();
      case 2:
        return opFree();
      case 3:
        return opBadFree();
      case 4:
        return opPinned();
      case 5:
      case 6:
        return opHostToDevice();
      case 7:
      case 8:
        return opDeviceToHost();
      case 9:
        return opDeviceToDevice();
      case 10:
        return opMemset();
      case 11:
        return opBadCopy();
      case 12:
        return opWildCopy();
      case 13:
      case 14:
        return opStream();
      case 15:
      case 16:
        return opEvent();
      case 17:
      case 18:
        return opLaunch();
      case 19:
        return opDevice();
      case 20:
        return opPointerQueries();
      case 21:
        return opMisc();
      case 22:
        return opKernelWrite();
      case 23:
        return opVerify();
      case 24:
        return opBadMemset();
      case 25:
        return opIpc();
      case 26:
        return opGraph();
      case 27:
        return opVirtualMemory();
      default:
        return chance(50) ? opLaunch() : opHostToDevice();
    }
  }

  void opMalloc() {
    if (allocs_.size() > 24) return opFree();
    std::shared_lock<std::shared_mutex> reuse(gShared.reuse);
    if (chance(5)) {
      void* p = nullptr;
      const std::size_t sizes[] = {SIZE_MAX, SIZE_MAX / 2, gShared.capacity + 1,
                                   std::size_t{1} << 62};
      call("orMalloc", kMemory, [&] { return orMalloc(&p, sizes[below(4)]); });
      call("orMalloc", kValue, [] { return orMalloc(nullptr, 64); });
      return;
    }
    if (chance(3)) {
      void* p = reinterpret_cast<void*>(1);
      call("orMalloc", 0, [&] { return orMalloc(&p, 0); });
      if (p != nullptr) die("orMalloc of 0 bytes did not give NULL");
      return;
    }
    const bool large = chance(3);
    const std::size_t size = large ? gShared.capacity / 4 : allocationSize();
    void* p = nullptr;
    const orError_t e = call("orMalloc", kMemory, [&] { return orMalloc(&p, size); });
    if (e != orSuccess) return;
    if (reinterpret_cast<std::uintptr_t>(p) % 4096 != 0) die("orMalloc: misaligned result");
    Alloc a;
    a.ptr = static_cast<char*>(p);
    a.size = size;
    a.device = current_;
    a.tracked = !large;
    if (a.tracked) a.shadow.assign(size, 0);  // fresh memory reads as zeros
    allocs_.push_back(std::move(a));
  }

  void opFree() {
    if (allocs_.empty()) return opMalloc();
    const std::size_t i = below(allocs_.size());
    std::unique_lock<std::shared_mutex> reuse(gShared.reuse, std::defer_lock);
    const bool twice = chance(30);
    if (twice) reuse.lock();
    call("orFree", kLaunch, [&] { return orFree(allocs_[i].ptr); });
    if (twice) {
      call("orFree", kPointer, [&] { return orFree(allocs_[i].ptr); });
      orPointerAttributes attributes;
      call("orPointerGetAttributes", kPointer,
           [&] { return orPointerGetAttributes(&attributes, allocs_[i].ptr); });
    }
    allocs_.erase(allocs_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  void opBadFree() {
    int local = 0;
    call("orFree", kPointer, [&] { return orFree(&local); });
    call("orFree", kPointer, [] { return orFree(kWildHost); });
    call("orFree", 0, [] { return orFree(nullptr); });
    if (!allocs_.empty()) {
      Alloc& a = pick(allocs_);
      if (a.size > 1) {
        char* interior = a.ptr + 1 + below(a.size - 1);
        call("orFree", kPointer, [&] { return orFree(interior); });
      }
    }
    call("orFreeHost", kValue, [&] { return orFreeHost(&local); });
    call("orFreeHost", kValue, [] { return orFreeHost(kWildHost); });
    call("orFreeHost", 0, [] { return orFreeHost(nullptr); });
    if (!pinned_.empty()) {
      Pinned& p = pick(pinned_);
      if (p.size > 1) {
        char* interior = p.ptr + 1 + below(p.size - 1);
        call("orFreeHost", kValue, [&] { return orFreeHost(interior); });
      }
    }
  }

  void opPinned() {
    if (!pinned_.empty() && (pinned_.size() > 6 || chance(40))) {
      const std::size_t i = below(pinned_.size());
      std::unique_lock<std::shared_mutex> reuse(gShared.reuse, std::defer_lock);
      const bool twice = chance(30);
      if (twice) reuse.lock();
      call("orFreeHost", kLaunch, [&] { return orFreeHost(pinned_[i].ptr); });
      if (twice) call("orFreeHost", kValue, [&] { return orFreeHost(pinned_[i].ptr); });
      pinned_.erase(pinned_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    std::shared_lock<std::shared_mutex> reuse(gShared.reuse);
    if (chance(5)) {
      void* p = nullptr;
      call("orMallocHost", kMemory, [&] { return orMallocHost(&p, SIZE_MAX); });
      call("orMallocHost", kValue, [] { return orMallocHost(nullptr, 8); });
      return;
    }
    Pinned p;
    p.size = 1 + below(64 << 10);
    p.source = chance(50);
    void* ptr = nullptr;
    if (call("orMallocHost", kMemory, [&] { return orMallocHost(&ptr, p.size); }) != orSuccess)
      return;
    p.ptr = static_cast<char*>(ptr);
    for (std::size_t i = 0; i < p.size; ++i) p.ptr[i] = static_cast<char>(rng_());
    pinned_.push_back(p);
  }

  // A range [*offset, *offset + *count) inside `a`, possibly empty.
  void range(const Alloc& a, std::size_t limit, std::size_t* offset, std::size_t* count) {
    *offset = below(a.size + 1);
    *count = std::min(below(a.size - *offset + 1), limit);
  }

  orMemcpyKind kindOr(orMemcpyKind actual) { return chance(25) ? orMemcpyDefault : actual; }

  void opHostToDevice() {
    if (allocs_.empty()) return opMalloc();
    Alloc& a = pick(allocs_);
    std::size_t offset, count;
    range(a, scratch_.size(), &offset, &count);
    // The source: a pinned source buffer (never written again), or pageable scratch.
    const char* src = nullptr;
    Pinned* pinned = nullptr;
    if (!pinned_.empty() && chance(50)) {
      Pinned& p = pick(pinned_);
      if (p.source && p.size >= count) pinned = &p;
    }
    if (pinned != nullptr) {
      src = pinned->ptr + below(pinned->size - count + 1);
    } else {
      for (std::size_t i = 0; i < count; ++i) scratch_[i] = static_cast<std::uint8_t>(rng_());
      src = reinterpret_cast<const char*>(scratch_.data());
    }
    context_ = "host to device, " + std::to_string(count) + " bytes at offset " +
               std::to_string(offset) + " of " + std::to_string(a.size);
    orError_t e;
    orStream_t identity;
    if (chance(40)) {
      identity = defaults_[a.device];
      orderAfter(identity, a);
      e = call("orMemcpy", kLaunch,
               [&] { return orMemcpy(a.ptr + offset, src, count, kindOr(orMemcpyHostToDevice)); });
    } else {
      int device;
      const orStream_t s = liveStream(&identity, &device);
      orderAfter(identity, a);
      e = call("orMemcpyAsync", kLaunch, [&] {
        return orMemcpyAsync(a.ptr + offset, src, count, kindOr(orMemcpyHostToDevice), s);
      });
    }
    if (e != orSuccess && e != orErrorLaunchFailure) return;
    if (count > 0) a.pending = identity;
    if (a.tracked && count > 0) std::memcpy(a.shadow.data() + offset, src, count);
    note(a, context_ + " on stream " + hex(identity));
  }

  void opDeviceToHost() {
    if (allocs_.empty()) return opMalloc();
    Alloc& a = pick(allocs_);
    std::size_t offset, count;
    range(a, readBack_.size(), &offset, &count);
    context_ = "device to host, " + std::to_string(count) + " bytes at offset " +
               std::to_string(offset) + " of " + std::to_string(a.size);
    orStream_t identity;
    // Into a pinned sink asynchronously: nothing to compare until it completes, so no check.
    if (!pinned_.empty() && chance(30)) {
      Pinned& p = pick(pinned_);
      if (!p.source && p.size >= count) {
        int device;
        const orStream_t s = liveStream(&identity, &device);
        orderAfter(identity, a);
        orderAfter(identity, p);
        const orError_t e = call("orMemcpyAsync", launchCodes(), [&] {
          return orMemcpyAsync(p.ptr, a.ptr + offset, count, kindOr(orMemcpyDeviceToHost), s);
        });
        if (e == orSuccess && count > 0) a.pending = p.pending = identity;
        return;
      }
    }
    // Into pageable memory: complete on return, so the bytes must match the shadow.
    orError_t e;
    if (chance(50)) {
      identity = defaults_[a.device];
      orderAfter(identity, a);
      e = call("orMemcpy", kLaunch, [&] {
        return orMemcpy(readBack_.data(), a.ptr + offset, count, kindOr(orMemcpyDeviceToHost));
      });
    } else {
      int device;
      const orStream_t s = liveStream(&identity, &device);
      orderAfter(identity, a);
      e = call("orMemcpyAsync", kLaunch, [&] {
        return orMemcpyAsync(readBack_.data(), a.ptr + offset, count, kindOr(orMemcpyDeviceToHost),
                             s);
      });
    }
    if (e != orSuccess && e != orErrorLaunchFailure) return;
    if (count > 0) a.pending = identity;
    if (a.tracked && count > 0 &&
        std::memcmp(readBack_.data(), a.shadow.data() + offset, count) != 0) {
      mismatch(a, offset);
    }
  }

  void opDeviceToDevice() {
    if (allocs_.empty()) return opMalloc();
    Alloc& src = pick(allocs_);
    Alloc& dst = pick(allocs_);
    std::size_t srcOffset, count;
    range(src, SIZE_MAX, &srcOffset, &count);
    if (count > dst.size) count = dst.size;
    const std::size_t dstOffset = below(dst.size - count + 1);
    context_ = "device to device, " + std::to_string(count) + " bytes";
    orStream_t identity;
    orError_t e;
    if (chance(50)) {
      identity = defaults_[src.device];
      orderAfter(identity, src);
      orderAfter(identity, dst);
      e = call("orMemcpy", kLaunch, [&] {
        return orMemcpy(dst.ptr + dstOffset, src.ptr + srcOffset, count,
                        kindOr(orMemcpyDeviceToDevice));
      });
    } else {
      int device;
      const orStream_t s = liveStream(&identity, &device);
      orderAfter(identity, src);
      orderAfter(identity, dst);
      e = call("orMemcpyAsync", launchCodes(), [&] {
        return orMemcpyAsync(dst.ptr + dstOffset, src.ptr + srcOffset, count,
                             kindOr(orMemcpyDeviceToDevice), s);
      });
    }
    if (e != orSuccess && e != orErrorLaunchFailure) return;
    if (count == 0) return;
    src.pending = identity;
    dst.pending = identity;
    note(dst, "copy " + std::to_string(count) + " bytes to " + std::to_string(dstOffset) +
                  " from " + std::to_string(srcOffset) + " of " + hex(src.ptr) + " on stream " +
                  hex(identity));
    if (!dst.tracked) return;
    if (!src.tracked) {
      dst.tracked = false;  // what it holds now is unknown
      dst.shadow.clear();
      return;
    }
    std::memmove(dst.shadow.data() + dstOffset, src.shadow.data() + srcOffset, count);
  }

  void opMemset() {
    if (allocs_.empty()) return opMalloc();
    Alloc& a = pick(allocs_);
    std::size_t offset, count;
    range(a, SIZE_MAX, &offset, &count);
    const int value = static_cast<int>(rng_());
    orStream_t identity;
    orError_t e;
    if (chance(40)) {
      identity = defaults_[a.device];
      orderAfter(identity, a);
      e = call("orMemset", kLaunch, [&] { return orMemset(a.ptr + offset, value, count); });
    } else {
      int device;
      const orStream_t s = liveStream(&identity, &device);
      orderAfter(identity, a);
      e = call("orMemsetAsync", launchCodes(),
               [&] { return orMemsetAsync(a.ptr + offset, value, count, s); });
    }
    if (e != orSuccess && e != orErrorLaunchFailure) return;
    if (count > 0) a.pending = identity;
    if (a.tracked && count > 0) {
      std::memset(a.shadow.data() + offset, static_cast<unsigned char>(value), count);
    }
    note(a, "memset " + std::to_string(count) + " bytes at " + std::to_string(offset) + " to " +
                std::to_string(value & 0xff) + " on stream " + hex(identity));
  }

  void opBadMemset() {
    int local = 0;
    call("orMemset", kPointer, [&] { return orMemset(&local, 0, sizeof local); });
    call("orMemset", kPointer, [] { return orMemset(nullptr, 0, 0); });
    call("orMemsetAsync", 0, [&] { return orMemsetAsync(&local, 0, 0, nullptr); });
    call("orMemsetAsync", kPointer, [] { return orMemsetAsync(kWildHost, 1, 4, nullptr); });
    call("orMemsetAsync", kHandle,
         [&] { return orMemsetAsync(nullptr, 0, 4, staleOrGarbageStream()); });
    if (!allocs_.empty()) {
      Alloc& a = pick(allocs_);
      const std::size_t counts[] = {a.size + 1, SIZE_MAX, SIZE_MAX - 4096};
      const std::size_t count = counts[below(3)];
      call("orMemset", kValue, [&] { return orMemset(a.ptr, 0, count); });
      call("orMemsetAsync", kValue,
           [&] { return orMemsetAsync(a.ptr + a.size - 1, 0, 2, nullptr); });
    }
  }

  // Copies the checks reject before touching anything.
  void opBadCopy() {
    std::uint8_t* host = scratch_.data();
    call("orMemcpy", kValue, [&] { return orMemcpy(nullptr, host, 8, orMemcpyHostToHost); });
    call("orMemcpy", kValue, [&] { return orMemcpy(host, nullptr, 8, orMemcpyDefault); });
    const int badKinds[] = {-1, 5, 42, INT_MIN, INT_MAX};
    const int kind = badKinds[below(5)];
    call("orMemcpy", kValue, [&] { return fuzzMemcpyWithKind(host, host + 64, 8, kind); });
    call("orMemcpyAsync", kValue,
         [&] { return fuzzMemcpyAsyncWithKind(host, host + 64, 8, kind, nullptr); });
    call("orMemcpyAsync", kHandle, [&] {
      return orMemcpyAsync(host, host + 64, 8, orMemcpyHostToHost, staleOrGarbageStream());
    });
    if (allocs_.empty()) return;
    Alloc& a = pick(allocs_);
    call("orMemcpy", kDirection,
         [&] { return orMemcpy(host, a.ptr, 8 > a.size ? a.size : 8, orMemcpyHostToDevice); });
    call("orMemcpy", kDirection, [&] { return orMemcpy(a.ptr, host, 1, orMemcpyDeviceToHost); });
    call("orMemcpy", kDirection, [&] { return orMemcpy(a.ptr, a.ptr, 1, orMemcpyHostToHost); });
    const std::size_t counts[] = {a.size + 1, SIZE_MAX, SIZE_MAX / 2, std::size_t{1} << 40};
    const std::size_t count = counts[below(4)];
    call("orMemcpy", kValue,
         [&] { return orMemcpy(a.ptr, host, count, kindOr(orMemcpyHostToDevice)); });
    call("orMemcpyAsync", kValue,
         [&] { return orMemcpyAsync(host, a.ptr + a.size - 1, 2, orMemcpyDeviceToHost, nullptr); });
    Alloc& b = pick(allocs_);
    if (b.size % 4096 != 0) {  // one past the end, still inside b's reserved range
      call("orMemcpy", kValue,
           [&] { return orMemcpy(b.ptr + b.size, a.ptr, 1, orMemcpyDeviceToDevice); });
    }
  }

  // The wild host pointers the runtime documents as handled: a copy's host side.
  void opWildCopy() {
    void* wild = kSharedWildPointer && chance(50) ? kWildHost : noAccessPage_;
    const std::size_t count = 1 + below(4000);
    std::uint8_t* host = scratch_.data();
    call("orMemcpy", kValue, [&] { return orMemcpy(host, wild, count, orMemcpyHostToHost); });
    call("orMemcpy", kValue, [&] { return orMemcpy(wild, host, count, orMemcpyDefault); });
    call("orMemcpyAsync", kValue,
         [&] { return orMemcpyAsync(host, wild, count, orMemcpyDefault, nullptr); });
    if (allocs_.empty()) return;
    Alloc& a = pick(allocs_);
    const std::size_t n = std::min(count, a.size);
    orStream_t identity;
    int device;
    const orStream_t s = liveStream(&identity, &device);
    orderAfter(identity, a);
    orderAfter(defaults_[a.device], a);
    call("orMemcpy", kValue, [&] { return orMemcpy(a.ptr, wild, n, orMemcpyHostToDevice); });
    call("orMemcpy", kValue, [&] { return orMemcpy(wild, a.ptr, n, orMemcpyDefault); });
    call("orMemcpyAsync", kValue,
         [&] { return orMemcpyAsync(a.ptr, wild, n, orMemcpyHostToDevice, s); });
    call("orMemcpyAsync", kValue,
         [&] { return orMemcpyAsync(wild, a.ptr, n, orMemcpyDeviceToHost, s); });
    // Each of these completed (or faulted) before returning: nothing more to order.
  }

  void opStream() {
    switch (below(9)) {
      case 0: {
        if (streams_.size() > 8) break;
        orStream_t s = nullptr;
        const orError_t e = call("orStreamCreate", kMemory, [&] { return orStreamCreate(&s); });
        if (e == orSuccess) streams_.push_back({s, current_});
        call("orStreamCreate", kValue, [] { return orStreamCreate(nullptr); });
        break;
      }
      case 1: {
        if (streams_.size() > 8) break;
        const int priorities[] = {0, -1, 1, -100, INT_MAX, INT_MIN};
        const int priority = priorities[below(6)];
        const unsigned flags = chance(20) ? static_cast<unsigned>(rng_()) | 1u : 0u;
        orStream_t s = nullptr;
        const orError_t e = call("orStreamCreateWithPriority", flags != 0 ? kValue : kMemory,
                                 [&] { return orStreamCreateWithPriority(&s, flags, priority); });
        if (e == orSuccess) {
          streams_.push_back({s, current_});
          int got = 99;
          call("orStreamGetPriority", 0, [&] { return orStreamGetPriority(s, &got); });
          if (got != std::clamp(priority, -1, 0)) die("stream priority not clamped");
        }
        break;
      }
      case 2: {
        if (streams_.empty()) break;
        const std::size_t i = below(streams_.size());
        const orStream_t s = streams_[i].handle;
        // Memory work on it is waited for first, so later work needs no event from it.
        bool pendingMemory = false;
        for (Alloc& a : allocs_) pendingMemory = pendingMemory || a.pending == s;
        for (Pinned& p : pinned_) pendingMemory = pendingMemory || p.pending == s;
        if (pendingMemory) {
          call("orStreamSynchronize", kLaunch, [&] { return orStreamSynchronize(s); });
          for (Alloc& a : allocs_) a.pending = a.pending == s ? nullptr : a.pending;
          for (Pinned& p : pinned_) p.pending = p.pending == s ? nullptr : p.pending;
        }
        call("orStreamDestroy", 0, [&] { return orStreamDestroy(s); });
        streams_.erase(streams_.begin() + static_cast<std::ptrdiff_t>(i));
        staleStreams_.push_back(s);
        break;
      }
      case 3: {
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        call("orStreamQuery", kNotReady | kLaunch, [&] { return orStreamQuery(s); });
        int got = -1;
        call("orStreamGetDevice", 0, [&] { return orStreamGetDevice(s, &got); });
        if (got != device) die("orStreamGetDevice: wrong device");
        break;
      }
      case 4: {
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        call("orStreamSynchronize", kLaunch, [&] { return orStreamSynchronize(s); });
        break;
      }
      case 5: {
        const orStream_t s = staleOrGarbageStream();
        int value = 0;
        call("orStreamQuery", kHandle, [&] { return orStreamQuery(s); });
        call("orStreamSynchronize", kHandle, [&] { return orStreamSynchronize(s); });
        call("orStreamDestroy", kHandle, [&] { return orStreamDestroy(s); });
        call("orStreamGetPriority", kHandle, [&] { return orStreamGetPriority(s, &value); });
        call("orStreamGetDevice", kHandle, [&] { return orStreamGetDevice(s, &value); });
        call("orStreamGetDevice", kValue, [&] { return orStreamGetDevice(s, nullptr); });
        call("orStreamGetPriority", kValue, [&] { return orStreamGetPriority(nullptr, nullptr); });
        break;
      }
      case 6: {
        call("orStreamDestroy", kNotPermitted, [] { return orStreamDestroy(nullptr); });
        const int d = static_cast<int>(below(gShared.devices));
        call("orStreamDestroy", kNotPermitted, [&] { return orStreamDestroy(defaults_[d]); });
        break;
      }
      case 7: {
        orStream_t s = nullptr;
        const int d = badDevice();
        call("orDeviceGetDefaultStream", kDevice, [&] { return orDeviceGetDefaultStream(d, &s); });
        call("orDeviceGetDefaultStream", kValue,
             [] { return orDeviceGetDefaultStream(0, nullptr); });
        break;
      }
      default: {
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        call("orStreamCreateWithPriority", kValue,
             [] { return orStreamCreateWithPriority(nullptr, 0, 0); });
        int priority = 5;
        call("orStreamGetPriority", 0, [&] { return orStreamGetPriority(s, &priority); });
        if (priority != 0 && priority != -1) die("orStreamGetPriority: out of range");
        break;
      }
    }
  }

  void opEvent() {
    switch (below(8)) {
      case 0: {
        if (events_.size() > 8) break;
        const unsigned flagChoices[] = {orEventDefault,
                                        orEventDisableTiming,
                                        orEventDisableFailure,
                                        1u,
                                        8u,
                                        static_cast<unsigned>(rng_()) | 1u};
        const unsigned flags = flagChoices[below(6)];
        const bool valid =
            (flags & ~static_cast<unsigned>(orEventDisableTiming | orEventDisableFailure)) == 0;
        orEvent_t e = nullptr;
        const orError_t r = call("orEventCreateWithFlags", valid ? kMemory : kValue,
                                 [&] { return orEventCreateWithFlags(&e, flags); });
        if (r == orSuccess) events_.push_back({e, current_});
        call("orEventCreate", kValue, [] { return orEventCreate(nullptr); });
        break;
      }
      case 1: {
        if (events_.empty()) break;
        FuzzEvent& e = pick(events_);
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        call("orEventRecord", device == e.device ? 0 : kHandle,
             [&] { return orEventRecord(e.handle, s); });
        break;
      }
      case 2: {
        if (events_.empty()) break;
        FuzzEvent& e = pick(events_);
        call("orEventQuery", kNotReady | kLaunch, [&] { return orEventQuery(e.handle); });
        call("orEventSynchronize", kLaunch, [&] { return orEventSynchronize(e.handle); });
        call("orEventQuery", kLaunch, [&] { return orEventQuery(e.handle); });
        break;
      }
      case 3: {
        if (events_.empty()) break;
        FuzzEvent& a = pick(events_);
        FuzzEvent& b = pick(events_);
        float ms = 0;
        call("orEventElapsedTime", kNotReady | kHandle,
             [&] { return orEventElapsedTime(&ms, a.handle, b.handle); });
        call("orEventElapsedTime", kValue,
             [&] { return orEventElapsedTime(nullptr, a.handle, b.handle); });
        break;
      }
      case 4: {
        if (events_.empty()) break;
        FuzzEvent& e = pick(events_);
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        const unsigned flags = chance(20) ? 1u + static_cast<unsigned>(below(100)) : 0u;
        call("orStreamWaitEvent", flags != 0 ? kValue : 0,
             [&] { return orStreamWaitEvent(s, e.handle, flags); });
        break;
      }
      case 5: {
        if (events_.empty()) break;
        const std::size_t i = below(events_.size());
        const orEvent_t e = events_[i].handle;
        call("orEventDestroy", 0, [&] { return orEventDestroy(e); });
        events_.erase(events_.begin() + static_cast<std::ptrdiff_t>(i));
        staleEvents_.push_back(e);
        break;
      }
      default: {
        const orEvent_t e = staleOrGarbageEvent();
        float ms = 0;
        orStream_t identity;
        int device;
        const orStream_t s = liveStream(&identity, &device);
        call("orEventRecord", kHandle, [&] { return orEventRecord(e, s); });
        call("orEventQuery", kHandle, [&] { return orEventQuery(e); });
        call("orEventSynchronize", kHandle, [&] { return orEventSynchronize(e); });
        call("orEventDestroy", kHandle, [&] { return orEventDestroy(e); });
        call("orStreamWaitEvent", kHandle, [&] { return orStreamWaitEvent(s, e, 0); });
        call("orEventElapsedTime", kHandle, [&] { return orEventElapsedTime(&ms, e, e); });
        if (!events_.empty()) {
          FuzzEvent& good = pick(events_);
          call("orEventRecord", kHandle,
               [&] { return orEventRecord(good.handle, staleOrGarbageStream()); });
        }
        break;
      }
    }
  }

  // What tasks count and report. The thread's last settle() waits for every task it launched.
  struct TaskState {
    std::atomic<long> launched{0};
    std::atomic<long> ran{0};
    std::atomic<long> inTaskViolations{0};
    std::string inTaskReport;  // first violation, written once
    std::mutex reportMutex;
  };

  static void countingTask(void* arg) { static_cast<TaskState*>(arg)->ran.fetch_add(1); }

  // Inside a task: every synchronizing call is refused, whatever its arguments.
  static void synchronizingTask(TaskState* state) {
    struct Check {
      const char* name;
      orError_t result;
    };
    const Check checks[] = {
        {"orDeviceSynchronize", orDeviceSynchronize()},
        {"orStreamSynchronize", orStreamSynchronize(nullptr)},
        {"orEventSynchronize", orEventSynchronize(nullptr)},
        {"orFree", orFree(kWildHost)},
        {"orFreeHost", orFreeHost(kWildHost)},
        {"orMemcpy", orMemcpy(nullptr, nullptr, 8, orMemcpyHostToHost)},
        {"orMemset", orMemset(nullptr, 0, 8)},
    };
    for (const Check& c : checks) {
      if (c.result != orErrorNotPermitted) {
        std::lock_guard<std::mutex> lock(state->reportMutex);
        if (state->inTaskViolations.fetch_add(1) == 0) {
          state->inTaskReport = std::string(c.name) + " returned " + orGetErrorName(c.result);
        }
      }
    }
    // Non-synchronizing calls still work.
    int device = -1;
    if (orGetDevice(&device) != orSuccess ||
        orStreamQuery(nullptr) == orErrorInvalidResourceHandle) {
      std::lock_guard<std::mutex> lock(state->reportMutex);
      if (state->inTaskViolations.fetch_add(1) == 0) state->inTaskReport = "orGetDevice in a task";
    }
  }

  void opLaunch() {
    orStream_t identity;
    int device;
    const orStream_t s = liveStream(&identity, &device);
    TaskState* state = &counted_;
    switch (below(7)) {
      case 0:
      case 1: {
        state->launched.fetch_add(1);
        call("orLaunchHostFunc", launchCodes(),
             [&] { return orLaunchHostFunc(s, &Fuzzer::countingTask, state); });
        break;
      }
      case 2: {
        state->launched.fetch_add(1);
        call("orLaunchTask", launchCodes(),
             [&] { return openreg::launch(s, [state] { state->ran.fetch_add(1); }); });
        break;
      }
      case 3: {
        gShared.throwingTasks.fetch_add(1);
        const bool standard = chance(50);
        call("orLaunchTask", kLaunch, [&] {
          return openreg::launch(s, [standard] {
            if (standard) throw std::runtime_error("the fuzzer's task failed on purpose");
            throw 42;
          });
        });
        break;
      }
      case 4: {
        call("orLaunchTask", launchCodes(),
             [&] { return openreg::launch(s, [state] { synchronizingTask(state); }); });
        break;
      }
      case 5: {
        // A task launching another: the inner launch never blocks, even under
        // OPENREG_LAUNCH_BLOCKING.
        state->launched.fetch_add(2);
        call("orLaunchTask", launchCodes(), [&] {
          return openreg::launch(s, [state] {
            state->ran.fetch_add(1);
            if (openreg::launch(nullptr, [state] { state->ran.fetch_add(1); }) != orSuccess) {
              std::lock_guard<std::mutex> lock(state->reportMutex);
              if (state->inTaskViolations.fetch_add(1) == 0) {
                state->inTaskReport = "a launch from inside a task failed";
              }
            }
          });
        });
        break;
      }
      default: {
        call("orLaunchHostFunc", kValue, [&] { return orLaunchHostFunc(s, nullptr, nullptr); });
        call("orLaunchHostFunc", kHandle, [&] {
          return orLaunchHostFunc(staleOrGarbageStream(), &Fuzzer::countingTask, state);
        });
        call("orLaunchTask", kValue, [&] { return openreg::launchTask(s, openreg::Task()); });
        // A task object the runtime refuses after taking it over (a size beyond the inline
        // storage, unknown flags) is destroyed by it, never run: the counter's reference goes.
        auto held = std::make_shared<int>(0);
        const std::pair<std::size_t, unsigned> refusals[] = {{OR_TASK_INLINE_BYTES + 1, 0},
                                                             {8, 0x80}};
        for (const auto& refused : refusals) {
          openreg::Task task([held] { ++*held; });
          const std::pair<const orTaskOps*, void*> given = task.release();
          call("orLaunchTask", kValue, [&] {
            return orLaunchTask(s, given.first, given.second, refused.first, refused.second);
          });
        }
        if (held.use_count() != 1 || *held != 0) {
          die("orLaunchTask kept or ran a task object it refused, " + context_);
        }
        int category = 0;
        call("orGetLastErrorCategory", kValue, [&] { return orGetLastErrorCategory(nullptr); });
        call("orGetLastErrorCategory", 0, [&] { return orGetLastErrorCategory(&category); });
        call("orCheckHostAccesses", kValue, [&] { return orCheckHostAccesses(nullptr, 1); });
        call("orActivitySetLabel", kValue,
             [&] { return fuzzActivitySetLabelWithKind(static_cast<int>(rng_()) | 4); });
        break;
      }
    }
  }

  // A task writes device memory through its kernel pointer.
  void opKernelWrite() {
    if (allocs_.empty()) return opMalloc();
    Alloc& a = pick(allocs_);
    const std::size_t offset = below(a.size);
    void* k = nullptr;
    call("orGetKernelPointer", 0, [&] { return orGetKernelPointer(&k, a.ptr + offset); });
    const auto value = static_cast<std::uint8_t>(rng_());
    orStream_t identity;
    int device;
    const orStream_t s = liveStream(&identity, &device);
    orderAfter(identity, a);
    const orError_t e = call("orLaunchTask", launchCodes(), [&] {
      return openreg::launch(s, [k, value] { *static_cast<std::uint8_t*>(k) = value; });
    });
    if (e != orSuccess && e != orErrorLaunchFailure) return;
    a.pending = identity;
    if (a.tracked) a.shadow[offset] = value;
    note(a, "kernel write of " + std::to_string(value) + " at " + std::to_string(offset) +
                " on stream " + hex(identity));
  }

  // Everything settles, then every tracked allocation is read back whole.
  void opVerify() {
    if (!chance(20)) return;
    settle();
    for (Alloc& a : allocs_) {
      if (!a.tracked || a.size > readBack_.size()) continue;
      context_ = "verify " + std::to_string(a.size) + " bytes at " + hex(a.ptr);
      const orError_t e = call("orMemcpy", kLaunch, [&] {
        return orMemcpy(readBack_.data(), a.ptr, a.size, orMemcpyDeviceToHost);
      });
      if (e != orSuccess && e != orErrorLaunchFailure) continue;
      a.pending = defaults_[a.device];
      if (std::memcmp(readBack_.data(), a.shadow.data(), a.size) != 0) mismatch(a, 0);
    }
  }

  void opDevice() {
    switch (below(6)) {
      case 0: {
        const int d = chance(70) ? static_cast<int>(below(gShared.devices)) : badDevice();
        const bool valid = d >= 0 && d < gShared.devices;
        call("orSetDevice", valid ? 0 : kDevice, [d] { return orSetDevice(d); });
        if (valid) current_ = d;
        int got = -1;
        call("orGetDevice", 0, [&] { return orGetDevice(&got); });
        if (got != current_) die("orGetDevice: not the device set");
        break;
      }
      case 1: {
        int count = 0;
        call("orGetDeviceCount", 0, [&] { return orGetDeviceCount(&count); });
        if (count != gShared.devices) die("orGetDeviceCount changed");
        call("orGetDeviceCount", kValue, [] { return orGetDeviceCount(nullptr); });
        call("orGetDevice", kValue, [] { return orGetDevice(nullptr); });
        break;
      }
      case 2: {
        orDeviceProp prop;
        const int d = chance(70) ? static_cast<int>(below(gShared.devices)) : badDevice();
        const bool valid = d >= 0 && d < gShared.devices;
        call("orGetDeviceProperties", valid ? 0 : kDevice,
             [&] { return orGetDeviceProperties(&prop, d); });
        if (valid && (prop.totalGlobalMem != gShared.capacity || prop.memoryAlignment != 4096)) {
          die("orGetDeviceProperties: wrong properties");
        }
        call("orGetDeviceProperties", kValue, [&] { return orGetDeviceProperties(nullptr, d); });
        break;
      }
      case 3: {
        std::size_t free = 0, total = 0;
        call("orMemGetInfo", 0, [&] { return orMemGetInfo(&free, &total); });
        if (total != gShared.capacity || free > total) die("orMemGetInfo: inconsistent");
        call("orMemGetInfo", kValue, [&] { return orMemGetInfo(nullptr, &total); });
        call("orMemGetInfo", kValue, [&] { return orMemGetInfo(&free, nullptr); });
        break;
      }
      case 4: {
        int least = 7, greatest = 7;
        int* l = chance(50) ? &least : nullptr;
        int* g = chance(50) ? &greatest : nullptr;
        call("orDeviceGetStreamPriorityRange", 0,
             [&] { return orDeviceGetStreamPriorityRange(l, g); });
        if ((l != nullptr && least != 0) || (g != nullptr && greatest != -1)) {
          die("orDeviceGetStreamPriorityRange: wrong range");
        }
        break;
      }
      default: {
        call("orDeviceSynchronize", kLaunch, [] { return orDeviceSynchronize(); });
        for (Alloc& a : allocs_) {
          if (a.pending != nullptr && deviceOfStream(a.pending) == current_) a.pending = nullptr;
        }
        for (Pinned& p : pinned_) {
          if (p.pending != nullptr && deviceOfStream(p.pending) == current_) p.pending = nullptr;
        }
        break;
      }
    }
  }

  // Sharing between processes, within one process: a handle of a live allocation is made, read,
  // queried, refused when opened here, and given back now or later (after its allocation may have
  // been freed, which then only retires it). Opening needs another process: IpcTest.cpp.
  void opIpc() {
    if (!handles_.empty() && chance(40)) {
      const std::size_t i = below(handles_.size());
      call("orIpcDiscardMemHandle", 0, [&] { return orIpcDiscardMemHandle(handles_[i]); });
      if (call("orIpcMemHandleQuery", 0, [&] { return orIpcMemHandleQuery(handles_[i]); }) !=
          orSuccess) {
        die("orIpcMemHandleQuery: a discarded handle still holds its reference");
      }
      call("orIpcDiscardMemHandle", kValue, [&] { return orIpcDiscardMemHandle(handles_[i]); });
      handles_.erase(handles_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
    orIpcMemHandle_t handle;
    std::memset(handle.reserved, static_cast<int>(below(256)), sizeof handle.reserved);
    void* opened = nullptr;
    orIpcMemHandleInfo info;
    call("orIpcOpenMemHandle", kValue, [&] { return orIpcOpenMemHandle(&opened, handle, 0); });
    call("orIpcGetMemHandleInfo", kValue, [&] { return orIpcGetMemHandleInfo(&info, handle); });
    call("orIpcMemHandleQuery", kValue, [&] { return orIpcMemHandleQuery(handle); });
    call("orIpcGetMemHandle", kValue, [&] { return orIpcGetMemHandle(nullptr, kWildHost); });
    call("orIpcGetMemHandle", kPointer, [&] { return orIpcGetMemHandle(&handle, kWildHost); });
    if (allocs_.empty() || handles_.size() > 16) return;
    const Alloc& a = pick(allocs_);
    call("orIpcCloseMemHandle", kPointer, [&] { return orIpcCloseMemHandle(a.ptr); });
    char* inside = a.ptr + below(a.size);
    if (call("orIpcGetMemHandle", kMemory, [&] { return orIpcGetMemHandle(&handle, inside); }) !=
        orSuccess) {
      return;
    }
    call("orIpcGetMemHandleInfo", 0, [&] { return orIpcGetMemHandleInfo(&info, handle); });
    if (info.device != a.device || info.size < a.size || info.exporterPid != getpid()) {
      die("orIpcGetMemHandleInfo: the handle does not describe its allocation");
    }
    if (call("orIpcMemHandleQuery", kNotReady, [&] { return orIpcMemHandleQuery(handle); }) !=
        orErrorNotReady) {
      die("orIpcMemHandleQuery: a handle just made does not hold its reference");
    }
    call("orIpcOpenMemHandle", kValue, [&] { return orIpcOpenMemHandle(&opened, handle, 0); });
    call("orIpcOpenMemHandle", kValue, [&] { return orIpcOpenMemHandle(&opened, handle, 1); });
    handles_.push_back(handle);
  }

  // A reservation of this thread's own (orMemAddressReserve), whose granules are mapped and
  // unmapped at random; copies across mapped runs read back what they wrote, and what is not
  // mapped, or not a reservation's, is refused.
  void opVirtualMemory() {
    constexpr std::size_t kGranules = 4;
    std::size_t g = 0;
    call("orMemGetAllocationGranularity", 0, [&] { return orMemGetAllocationGranularity(&g); });
    call("orMemGetAllocationGranularity", kValue,
         [] { return orMemGetAllocationGranularity(nullptr); });
    void* p = nullptr;
    call("orMemAddressReserve", kValue, [&] { return orMemAddressReserve(&p, g + below(g)); });
    call("orMemAddressReserve", kValue, [&] { return orMemAddressReserve(nullptr, g); });
    call("orMemAddressReserve", kMemory,
         [&] { return orMemAddressReserve(&p, (gShared.capacity / g + 1) * g * 64); });
    call("orMemMap", kValue, [&] { return orMemMap(kWildHost, g); });
    if (reserved_ == nullptr) {
      if (call("orMemAddressReserve", kMemory,
               [&] { return orMemAddressReserve(&reserved_, kGranules * g); }) != orSuccess) {
        reserved_ = nullptr;
      }
      mappedGranules_.assign(kGranules, false);
      return;
    }
    char* base = static_cast<char*>(reserved_);
    const std::size_t i = below(kGranules);
    const bool anyMapped =
        std::find(mappedGranules_.begin(), mappedGranules_.end(), true) != mappedGranules_.end();
    // Refused: with a granule mapped, the reservation; without, an interior address.
    call("orMemAddressFree", kValue,
         [&] { return orMemAddressFree(base + (anyMapped ? 0 : g), kGranules * g); });
    call("orFree", kPointer, [&] { return orFree(base); });
    orIpcMemHandle_t handle;
    call("orIpcGetMemHandle", kValue, [&] { return orIpcGetMemHandle(&handle, base + below(g)); });
    orPointerAttributes at;
    call("orPointerGetAttributes", mappedGranules_[i] ? 0 : kPointer,
         [&] { return orPointerGetAttributes(&at, base + i * g + below(g)); });
    if (mappedGranules_[i] && (at.base != base || at.size != kGranules * g)) {
      die("orPointerGetAttributes: mapped memory not described by its reservation");
    }
    call("orMemMap", kValue, [&] { return orMemMap(base + i * g + 4096, g); });
    if (!mappedGranules_[i]) {
      call("orMemUnmap", kValue, [&] { return orMemUnmap(base + i * g, g); });
      if (call("orMemMap", kMemory, [&] { return orMemMap(base + i * g, g); }) == orSuccess) {
        mappedGranules_[i] = true;
      }
      return;
    }
    call("orMemMap", kValue, [&] { return orMemMap(base + i * g, g); });
    // A copy from the granule into the next, when that is mapped too, reads back.
    if (i + 1 < kGranules && mappedGranules_[i + 1]) {
      const std::size_t count = 1 + below(readBack_.size());
      char* where = base + (i + 1) * g - below(count + 1);
      for (std::size_t k = 0; k < count; ++k) scratch_[k] = static_cast<std::uint8_t>(rng_());
      const orError_t e = call("orMemcpy", kLaunch, [&] {
        return orMemcpy(where, scratch_.data(), count, orMemcpyHostToDevice);
      });
      if (e == orSuccess && call("orMemcpy", kLaunch, [&] {
                              return orMemcpy(readBack_.data(), where, count, orMemcpyDeviceToHost);
                            }) == orSuccess) {
        if (std::memcmp(readBack_.data(), scratch_.data(), count) != 0) {
          die("a copy across two mappings did not read back (thread seed " + std::to_string(seed_) +
              ")");
        }
      }
    } else {
      char* where = base + i * g + g - 16;
      call("orMemset", kValue, [&] { return orMemset(where, 0, 32); });  // into the unmapped next
    }
    if (chance(50)) {
      call("orMemUnmap", 0, [&] { return orMemUnmap(base + i * g, g); });
      mappedGranules_[i] = false;
    } else if (chance(20)) {
      releaseReservation();
    }
  }

  void releaseReservation() {
    if (reserved_ == nullptr) return;
    std::size_t g = 0;
    call("orMemGetAllocationGranularity", 0, [&] { return orMemGetAllocationGranularity(&g); });
    for (std::size_t i = 0; i < mappedGranules_.size(); ++i) {
      if (!mappedGranules_[i]) continue;
      call("orMemUnmap", 0, [&] { return orMemUnmap(static_cast<char*>(reserved_) + i * g, g); });
    }
    call("orMemAddressFree", 0,
         [&] { return orMemAddressFree(reserved_, mappedGranules_.size() * g); });
    reserved_ = nullptr;
    mappedGranules_.clear();
  }

  void opPointerQueries() {
    orPointerAttributes at;
    int local = 0;
    call("orPointerGetAttributes", 0, [&] { return orPointerGetAttributes(&at, &local); });
    if (at.type != orMemoryTypeUnregistered || at.device != -1) die("attributes of host memory");
    call("orPointerGetAttributes", 0, [&] { return orPointerGetAttributes(&at, kWildHost); });
    call("orPointerGetAttributes", 0, [&] { return orPointerGetAttributes(&at, nullptr); });
    call("orPointerGetAttributes", kValue, [&] { return orPointerGetAttributes(nullptr, &local); });
    void* k = nullptr;
    call("orGetKernelPointer", kPointer, [&] { return orGetKernelPointer(&k, &local); });
    call("orGetKernelPointer", kValue, [&] { return orGetKernelPointer(nullptr, &local); });
    if (!allocs_.empty()) {
      Alloc& a = pick(allocs_);
      const std::size_t offset = below(a.size);
      call("orPointerGetAttributes", 0,
           [&] { return orPointerGetAttributes(&at, a.ptr + offset); });
      if (at.type != orMemoryTypeDevice || at.base != a.ptr || at.size != a.size ||
          at.device != a.device) {
        die("orPointerGetAttributes: wrong attributes of a device pointer");
      }
    }
    if (!pinned_.empty()) {
      Pinned& p = pick(pinned_);
      call("orPointerGetAttributes", 0,
           [&] { return orPointerGetAttributes(&at, p.ptr + below(p.size)); });
      if (at.type != orMemoryTypeHost || at.base != p.ptr || at.size != p.size) {
        die("orPointerGetAttributes: wrong attributes of pinned memory");
      }
    }
  }

  // A capture on a stream of this thread's own, in relaxed mode (so that the other threads'
  // synchronizing calls stay permitted), launched 0-2 times: every launch runs each captured
  // counting task once, and capturing runs none. Garbage graph handles are refused.
  void opGraph() {
    const auto garbage = std::uint64_t{0xFFFFFFF0} << 32 | 1;  // beyond every handle table
    call("orGraphDestroy", kHandle,
         [&] { return orGraphDestroy(reinterpret_cast<orGraph_t>(garbage)); });
    call("orGraphLaunch", kHandle,
         [&] { return orGraphLaunch(reinterpret_cast<orGraphExec_t>(garbage), nullptr); });
    call("orGraphInstantiate", kValue,
         [&] { return orGraphInstantiate(nullptr, reinterpret_cast<orGraph_t>(garbage), 0); });
    orStream_t s = nullptr;
    if (call("orStreamCreate", kMemory, [&] { return orStreamCreate(&s); }) != orSuccess) return;
    call("orStreamBeginCapture", 0,
         [&] { return orStreamBeginCapture(s, orStreamCaptureModeRelaxed); });
    TaskState* state = &counted_;
    const long tasks = 1 + static_cast<long>(below(4));
    for (long i = 0; i < tasks; ++i) {
      call("orLaunchHostFunc", 0,
           [&] { return orLaunchHostFunc(s, &Fuzzer::countingTask, state); });
    }
    orStreamCaptureStatus status = orStreamCaptureStatusNone;
    call("orStreamGetCaptureInfo", 0, [&] { return orStreamGetCaptureInfo(s, &status, nullptr); });
    if (status != orStreamCaptureStatusActive) die("a capture in progress is not reported active");
    orGraph_t graph = nullptr;
    orGraphExec_t exec = nullptr;
    call("orStreamEndCapture", 0, [&] { return orStreamEndCapture(s, &graph); });
    call("orGraphInstantiate", 0, [&] { return orGraphInstantiate(&exec, graph, 0); });
    const bool destroyFirst = chance(50);  // an executable graph outlives its graph
    if (destroyFirst) call("orGraphDestroy", 0, [&] { return orGraphDestroy(graph); });
    for (std::size_t i = below(3); i > 0; --i) {
      state->launched.fetch_add(tasks);
      call("orGraphLaunch", launchCodes(), [&] { return orGraphLaunch(exec, s); });
    }
    call("orGraphExecDestroy", 0, [&] { return orGraphExecDestroy(exec); });
    if (!destroyFirst) call("orGraphDestroy", 0, [&] { return orGraphDestroy(graph); });
    call("orStreamDestroy", 0, [&] { return orStreamDestroy(s); });
  }

  void opMisc() {
    const int code = chance(50) ? static_cast<int>(below(15)) : static_cast<int>(rng_());
    if (fuzzErrorName(code) == nullptr || fuzzErrorString(code) == nullptr) die("NULL error name");
    if (code >= 0 && code <= orErrorOutOfResources &&
        std::strcmp(fuzzErrorName(code), "orErrorUnknownCode") == 0) {
      die("a documented code without a name");
    }
    int version = 0;
    call("orRuntimeGetVersion", 0, [&] { return orRuntimeGetVersion(&version); });
    call("orRuntimeGetVersion", kValue, [] { return orRuntimeGetVersion(nullptr); });
    const unsigned flags = chance(50) ? 0u : static_cast<unsigned>(rng_()) | 1u;
    call("orInit", flags == 0 ? 0 : kValue, [flags] { return orInit(flags); });
  }

  std::mt19937_64 rng_;
  const unsigned long seed_;
  Progress& progress_;
  void* const noAccessPage_;  // this thread's own
  long op_ = 0;
  std::string context_;
  int current_ = 0;
  std::vector<orStream_t> defaults_;
  std::vector<orEvent_t> orderEvents_;
  std::vector<Alloc> allocs_;
  std::vector<orIpcMemHandle_t> handles_;  // made by opIpc, not yet given back
  void* reserved_ = nullptr;               // opVirtualMemory's reservation, or nullptr
  std::vector<bool> mappedGranules_;       // which of its granules are mapped
  std::vector<Pinned> pinned_;
  std::vector<FuzzStream> streams_;
  std::vector<orStream_t> staleStreams_;
  std::vector<FuzzEvent> events_;
  std::vector<orEvent_t> staleEvents_;
  std::vector<std::uint8_t> scratch_;
  std::vector<std::uint8_t> readBack_;
  TaskState counted_;
};

// ------------------------------------------------------------------------------------------------
// Rounds, the watchdog, the invariants between rounds.
// ------------------------------------------------------------------------------------------------
void check(orError_t e, const char* what) {
  if (e != orSuccess) {
    die(std::string(what) + ": " + orGetErrorName(e) + ": " + orGetLastErrorMessage());
  }
}

// Drains every device's pending task errors; a second synchronization must then report none.
void drainDevices() {
  for (int d = 0; d < gShared.devices; ++d) {
    check(orSetDevice(d), "orSetDevice");
    const orError_t first = orDeviceSynchronize();
    if (first != orSuccess && first != orErrorLaunchFailure) check(first, "orDeviceSynchronize");
    check(orDeviceSynchronize(), "a task error was reported twice");
  }
  check(orSetDevice(0), "orSetDevice");
}

long argument(int argc, char** argv, const char* flag, const char* env, long fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], flag) == 0) return std::strtol(argv[i + 1], nullptr, 10);
  }
  const char* value = std::getenv(env);
  return value != nullptr && *value != '\0' ? std::strtol(value, nullptr, 10) : fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const long seconds = argument(argc, argv, "--seconds", "FUZZ_SECONDS", 20);
  const unsigned long seed = static_cast<unsigned long>(argument(
      argc, argv, "--seed", "FUZZ_SEED", static_cast<long>(std::random_device{}() & 0x7fffffff)));
  const int threads = static_cast<int>(argument(argc, argv, "--threads", "FUZZ_THREADS", 4));
  // Small devices, so that large allocations run out; two workers, so streams run concurrently.
  setenv("OPENREG_DEVICE_MEMORY", "64M", 0);
  setenv("OPENREG_STREAM_WORKERS", "2", 0);
  const char* blocking = std::getenv("OPENREG_LAUNCH_BLOCKING");
  gShared.launchBlocking = blocking != nullptr && std::strcmp(blocking, "1") == 0;

  check(orInit(0), "orInit");
  check(orGetDeviceCount(&gShared.devices), "orGetDeviceCount");
  orDeviceProp prop;
  check(orGetDeviceProperties(&prop, 0), "orGetDeviceProperties");
  gShared.capacity = prop.totalGlobalMem;
  for (int t = 0; t < threads; ++t) {
    void* page = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED) die("mmap");
    gShared.noAccessPages.push_back(page);
  }
  orSetDevice(-777);
  gShared.sentinel = orGetLastErrorMessage();
  std::vector<std::size_t> baseline(gShared.devices);
  for (int d = 0; d < gShared.devices; ++d) {
    std::size_t total = 0;
    check(orSetDevice(d), "orSetDevice");
    check(orMemGetInfo(&baseline[d], &total), "orMemGetInfo");
  }
  check(orSetDevice(0), "orSetDevice");
  std::printf("runtime_fuzz: seed %lu, %d threads, %ld s, %d devices of %zu bytes%s\n", seed,
              threads, seconds, gShared.devices, gShared.capacity,
              gShared.launchBlocking ? ", OPENREG_LAUNCH_BLOCKING=1" : "");
  std::fflush(stdout);

  std::vector<Progress> progress(static_cast<std::size_t>(threads));
  std::atomic<bool> done{false};
  std::atomic<long> mainProgress{0};
  // The watchdog: a thread whose call count stands still for a minute is hung.
  std::thread watchdog([&] {
    constexpr int kHangSeconds = 60;
    std::vector<long> last(progress.size(), -1);
    std::vector<int> still(progress.size(), 0);
    long lastMain = -1;
    int mainStill = 0;
    while (!done.load()) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      for (std::size_t t = 0; t < progress.size(); ++t) {
        const long now = progress[t].calls.load();
        still[t] = progress[t].active.load() && now == last[t] ? still[t] + 1 : 0;
        last[t] = now;
        if (still[t] >= kHangSeconds) {
          die("hang: thread " + std::to_string(t) + " (seed " +
              std::to_string(progress[t].seed.load()) + ") has been in " +
              progress[t].current.load() + " for " + std::to_string(kHangSeconds) + " s");
        }
      }
      const long nowMain = mainProgress.load();
      mainStill = nowMain == lastMain ? mainStill + 1 : 0;
      lastMain = nowMain;
      if (mainStill >= 3 * kHangSeconds) die("hang: between rounds");
    }
  });

  const auto start = Clock::now();
  const auto deadline = start + std::chrono::seconds(seconds);
  int workerThreads = -1;
  long rounds = 0;
  while (Clock::now() < deadline) {
    const auto roundEnd = std::min(deadline, Clock::now() + std::chrono::seconds(2));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      const unsigned long threadSeed = seed + static_cast<unsigned long>(rounds) * 1000 + t;
      pool.emplace_back([&, t, threadSeed] {
        orSetDevice(t % gShared.devices);
        const auto i = static_cast<std::size_t>(t);
        Fuzzer(threadSeed, progress[i], gShared.noAccessPages[i]).run(roundEnd, 1L << 40);
      });
    }
    for (std::thread& t : pool) t.join();
    mainProgress.fetch_add(1);
    // Everything was freed: the memory is back, errors are reported once, no thread is left.
    drainDevices();
    for (int d = 0; d < gShared.devices; ++d) {
      std::size_t free = 0, total = 0;
      check(orSetDevice(d), "orSetDevice");
      check(orMemGetInfo(&free, &total), "orMemGetInfo");
      if (free != baseline[d]) {
        die("round " + std::to_string(rounds) + ": device " + std::to_string(d) + " has " +
            std::to_string(baseline[d] - free) + " bytes still allocated after every free");
      }
    }
    check(orSetDevice(0), "orSetDevice");
    // A joined thread can stay listed in /proc/self/task for a moment after pthread_join
    // returns: give the count up to a second to settle before calling it a leak.
    int count = openreg_test::threadCount();
    for (int i = 0; workerThreads >= 0 && count != workerThreads && i < 100; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      count = openreg_test::threadCount();
    }
    if (workerThreads < 0) workerThreads = count;
    if (count != workerThreads) {
      die("round " + std::to_string(rounds) + ": " + std::to_string(count) + " threads, " +
          std::to_string(workerThreads) + " after the first round");
    }
    ++rounds;
  }
  done.store(true);
  watchdog.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const long calls = gShared.calls.load();
  std::printf(
      "runtime_fuzz: seed %lu: %ld rounds, %ld calls in %.1f s (%.0f calls/s, each after a "
      "sentinel failure), %ld throwing tasks, no invariant broken\n",
      seed, rounds, calls, elapsed, static_cast<double>(calls) / elapsed,
      gShared.throwingTasks.load());
  return 0;
}
