// Sharing device memory between processes: the exporter's and importer's bookkeeping, and
// making, opening, closing and discarding handles (for IpcApi.cpp).
// See Note [Sharing device memory between processes] in Ipc.h.
#include "Ipc.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openreg/runtime.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "Poison.h"
#include "Runtime.h"

namespace openreg::ipc {

std::atomic<int> gRetired{0};

namespace {

constexpr std::uint32_t kMagic = 0x5049524f;  // "ORIP"
constexpr std::uint32_t kSlots = 4096;
constexpr std::size_t kPage = 4096;

// A slot's word: serial << 2 | state.
enum SlotState : std::uint64_t { kFree = 0, kUnopened = 1, kOpen = 2, kGivenBack = 3 };

struct Slot {
  std::atomic<std::uint64_t> word;
  std::atomic<std::int32_t> importer;  // the process that opened it; 0 until known
  std::int32_t unused;
};
static_assert(sizeof(Slot) == 16);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
                  std::atomic<std::int32_t>::is_always_lock_free,
              "slot words are shared between processes: they must be lock-free");
constexpr std::size_t kTableBytes = kSlots * sizeof(Slot);

// [marker: ipc-handle]
// What an orIpcMemHandle_t holds.
struct HandleData {
  std::uint32_t magic;
  std::int32_t pid;
  std::int32_t device;
  std::int32_t memoryFd;
  std::int32_t tableFd;
  std::uint32_t slot;
  std::uint64_t memoryInode;
  std::uint64_t tableInode;
  std::uint64_t serial;
  std::uint64_t offset;
  std::uint64_t size;
};
static_assert(sizeof(HandleData) <= OR_IPC_HANDLE_SIZE);

constexpr std::uint64_t word(std::uint64_t serial, SlotState state) {
  return serial << 2 | state;
}

struct Export {
  std::uint32_t slot;
  std::uint64_t serial;
};

// One slot of another process's table, mapped here (its page).
struct MappedSlot {
  void* page = nullptr;
  Slot* slot = nullptr;
};

struct Import {
  Device* device;
  MappedSlot slot;
  std::uint64_t serial;
  std::size_t size;
};

struct State {
  std::mutex mutex;
  // Exporter: the table and the handles out, by allocation base.
  int tableFd = -1;
  Slot* table = nullptr;
  std::uint64_t tableInode = 0;
  std::uint64_t nextSerial = 1;
  std::vector<std::uint32_t> freeSlots;
  std::map<std::uintptr_t, std::vector<Export>> exports;
  std::map<std::uintptr_t, Device*> retired;
  // Importer: open imports, by base address.
  std::map<std::uintptr_t, Import> imports;
};

// Immortal, as the runtime's own state (Note [Runtime initialization]).
State& state() {
  static State* s = new State;
  return *s;
}

std::string errnoText() {
  return std::strerror(errno);
}

// True when a system call failed for want of a resource (file descriptors, memory for mappings):
// the call then fails with orErrorOutOfResources, whatever the handle.
bool outOfResources(int error) {
  return error == EMFILE || error == ENFILE || error == ENOMEM || error == EAGAIN;
}

std::uint64_t inodeOf(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_ino) : 0;
}

bool decode(const orIpcMemHandle_t& handle, HandleData* out) {
  std::memcpy(out, handle.reserved, sizeof(HandleData));
  return out->magic == kMagic && out->pid > 0 && out->device >= 0 && out->slot < kSlots &&
         out->size > 0 && out->size % DeviceMemory::kAlignment == 0;
}

orError_t notAHandle(const char* call) {
  return fail(orErrorInvalidValue, call,
              "handle is not an openreg IPC handle (it must be the "
              "bytes orIpcGetMemHandle wrote, unchanged)");
}

// The exporter's table, created at the first export. Caller holds the mutex.
orError_t ensureTableLocked(State& s) {
  if (s.table != nullptr) return orSuccess;
  const int fd = memfd_create(OR_DEVICE_NAME "-ipc-exports", MFD_CLOEXEC);
  if (fd < 0) {
    return fail(orErrorOutOfResources, "orIpcGetMemHandle",
                "cannot create the export table: " + errnoText());
  }
  void* table = MAP_FAILED;
  if (ftruncate(fd, kTableBytes) == 0) {
    table = mmap(nullptr, kTableBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  }
  if (table == MAP_FAILED) {
    const std::string reason = errnoText();
    close(fd);
    return fail(orErrorOutOfResources, "orIpcGetMemHandle",
                "cannot map the export table: " + reason);
  }
  s.tableFd = fd;
  s.table = static_cast<Slot*>(table);  // a new memfd reads as zeros: every slot is free
  s.tableInode = inodeOf(fd);
  for (std::uint32_t i = kSlots; i > 0; --i) s.freeSlots.push_back(i - 1);
  return orSuccess;
}

// Whether the reference of an export is back: given back, or held by a process that is gone.
bool referenceBack(const State& s, const Export& e) {
  const Slot& slot = s.table[e.slot];
  const std::uint64_t w = slot.word.load(std::memory_order_acquire);
  if ((w >> 2) != e.serial) return true;
  const auto state = static_cast<SlotState>(w & 3);
  if (state == kGivenBack) return true;
  if (state == kOpen) {
    const int pid = slot.importer.load(std::memory_order_acquire);
    if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) return true;
  }
  return false;
}

// [marker: ipc-collect]
// Frees the slots of references that are back and releases retired allocations left with none.
void collectLocked(State& s) {
  for (auto it = s.exports.begin(); it != s.exports.end();) {
    auto& list = it->second;
    for (std::size_t i = 0; i < list.size();) {
      if (referenceBack(s, list[i])) {
        s.table[list[i].slot].word.store(kFree, std::memory_order_release);
        s.freeSlots.push_back(list[i].slot);
        list[i] = list.back();
        list.pop_back();
      } else {
        ++i;
      }
    }
    if (!list.empty()) {
      ++it;
      continue;
    }
    if (auto r = s.retired.find(it->first); r != s.retired.end()) {
      r->second->memory.releaseRetired(reinterpret_cast<void*>(it->first));
      s.retired.erase(r);
      gRetired.fetch_sub(1, std::memory_order_relaxed);
    }
    it = s.exports.erase(it);
  }
}

// Opens descriptor `fd` of the handle's process into *file and checks it is the file the handle
// names.
orError_t openForeign(const char* call, const HandleData& h, int fd, std::uint64_t inode,
                      int* file) {
  const std::string path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(fd);
  *file = open(path.c_str(), O_RDWR | O_CLOEXEC);
  const int error = errno;
  const std::string who = "process " + std::to_string(h.pid) + ", which made the handle,";
  if (*file < 0) {
    const std::string reason = "cannot open " + path + " (" + std::strerror(error) + "): ";
    if (outOfResources(error)) {
      return fail(orErrorOutOfResources, call,
                  reason +
                      "this process has no room for another open file; close some, or "
                      "raise its limit (ulimit -n)");
    }
    return fail(orErrorInvalidValue, call,
                reason + who +
                    (error == ENOENT ? " has exited or no longer holds its device memory"
                                     : " does not let this process open its device memory"));
  }
  if (inodeOf(*file) != inode) {
    close(*file);
    *file = -1;
    return fail(orErrorInvalidValue, call,
                who + " no longer holds the memory the handle names (the handle is stale)");
  }
  return orSuccess;
}

orError_t mapSlot(const char* call, int tableFile, std::uint32_t slot, MappedSlot* out) {
  const std::size_t byte = slot * sizeof(Slot);
  const std::size_t pageOffset = byte / kPage * kPage;
  void* page = mmap(nullptr, kPage, PROT_READ | PROT_WRITE, MAP_SHARED, tableFile,
                    static_cast<off_t>(pageOffset));
  if (page == MAP_FAILED) {
    const int error = errno;
    return fail(outOfResources(error) ? orErrorOutOfResources : orErrorInvalidValue, call,
                std::string("cannot map the exporter's export table: ") + std::strerror(error));
  }
  out->page = page;
  out->slot = reinterpret_cast<Slot*>(static_cast<char*>(page) + (byte - pageOffset));
  return orSuccess;
}

// Moves a slot from `from` to `to`; on failure says why in the call's words.
orError_t transition(const char* call, Slot& slot, std::uint64_t serial, SlotState from,
                     SlotState to) {
  std::uint64_t expected = word(serial, from);
  if (slot.word.compare_exchange_strong(expected, word(serial, to), std::memory_order_acq_rel)) {
    return orSuccess;
  }
  std::string why = "no longer valid (every reference it held is back with its exporter)";
  if ((expected >> 2) == serial) {
    if ((expected & 3) == kOpen) why = "already opened (each handle opens once: send a new one)";
    if ((expected & 3) == kGivenBack) why = "already closed or discarded";
  }
  return fail(orErrorInvalidValue, call, "the handle is " + why);
}

// The slot a handle names, in this process's table or mapped from the exporter's.
orError_t slotOf(const char* call, const HandleData& h, Slot** slot, MappedSlot* mapped) {
  State& s = state();
  if (h.pid == getpid()) {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.table == nullptr || h.tableInode != s.tableInode) return notAHandle(call);
    *slot = &s.table[h.slot];
    return orSuccess;
  }
  int table = -1;
  orError_t e = openForeign(call, h, h.tableFd, h.tableInode, &table);
  if (e != orSuccess) return e;
  e = mapSlot(call, table, h.slot, mapped);
  close(table);
  if (e == orSuccess) *slot = mapped->slot;
  return e;
}

}  // namespace

void collectRetired() {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.table != nullptr) collectLocked(s);
}

bool retireIfExported(Device& device, const void* base) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.table == nullptr) return false;
  collectLocked(s);
  const auto address = reinterpret_cast<std::uintptr_t>(base);
  if (s.exports.count(address) == 0) return false;
  if (device.memory.retire(base) != orSuccess) return false;
  s.retired.emplace(address, &device);
  gRetired.fetch_add(1, std::memory_order_relaxed);
  return true;
}

// [marker: ipc-get-handle]
orError_t exportAllocation(const char* call, Device& d, const DeviceMemory::Allocation& a,
                           orIpcMemHandle_t* handle) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (orError_t e = ensureTableLocked(s); e != orSuccess) return e;
  collectLocked(s);
  if (s.freeSlots.empty()) {
    return fail(orErrorMemoryAllocation, call,
                std::to_string(kSlots) +
                    " handles of this process are outstanding (opened or not yet opened); close "
                    "or discard some in the processes that received them");
  }
  const std::uint32_t slot = s.freeSlots.back();
  s.freeSlots.pop_back();
  const std::uint64_t serial = s.nextSerial++;
  s.table[slot].importer.store(0, std::memory_order_relaxed);
  s.table[slot].word.store(word(serial, kUnopened), std::memory_order_release);
  s.exports[a.base].push_back({slot, serial});

  HandleData h{};
  h.magic = kMagic;
  h.pid = getpid();
  h.device = d.index;
  h.memoryFd = d.memory.memoryFile();
  h.tableFd = s.tableFd;
  h.slot = slot;
  h.memoryInode = inodeOf(h.memoryFd);
  h.tableInode = s.tableInode;
  h.serial = serial;
  h.offset = d.memory.offsetOf(reinterpret_cast<void*>(a.base));
  h.size = a.reserved;
  std::memset(handle->reserved, 0, sizeof handle->reserved);
  std::memcpy(handle->reserved, &h, sizeof h);
  return orSuccess;
}

// [marker: ipc-open-handle]
orError_t openHandle(const char* call, const orIpcMemHandle_t& handle, void** devPtr) {
  HandleData h;
  if (!decode(handle, &h)) return notAHandle(call);
  if (h.pid == getpid()) {
    return fail(orErrorInvalidValue, call,
                "the handle was made by this process; a process "
                "uses its own memory through the pointer it allocated");
  }
  if (h.device >= deviceCount()) {
    return fail(orErrorInvalidDevice, call,
                "the handle's device " + std::to_string(h.device) +
                    " does not exist in this process (" + std::to_string(deviceCount()) +
                    " devices; give both processes the same OPENREG_DEVICE_COUNT)");
  }
  int memory = -1;
  orError_t e = openForeign(call, h, h.memoryFd, h.memoryInode, &memory);
  if (e != orSuccess) return e;
  Slot* slot = nullptr;
  MappedSlot mapped;
  e = slotOf(call, h, &slot, &mapped);
  if (e == orSuccess) e = transition(call, *slot, h.serial, kUnopened, kOpen);
  if (e != orSuccess) {
    close(memory);
    if (mapped.page != nullptr) munmap(mapped.page, kPage);
    return e;
  }
  slot->importer.store(getpid(), std::memory_order_release);

  Device& d = device(h.device);
  void* base = nullptr;
  std::string message;
  e = d.memory.allocate(h.size, &base, &message);
  if (e != orSuccess) {
    message = callMessage(call, "no room for the shared allocation: " + message);
  } else if (!d.memory.mapImport(base, h.size, memory, h.offset, h.pid)) {
    message = callMessage(
        call, "mapping process " + std::to_string(h.pid) + "'s memory failed: " + errnoText());
    d.memory.release(base);
    e = orErrorMemoryAllocation;
  }
  close(memory);  // the mapping keeps the file
  if (e != orSuccess) {
    std::uint64_t expected = word(h.serial, kOpen);
    slot->word.compare_exchange_strong(expected, word(h.serial, kUnopened));
    munmap(mapped.page, kPage);
    return fail(e, message);
  }
  State& s = state();
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.imports.emplace(reinterpret_cast<std::uintptr_t>(base), Import{&d, mapped, h.serial, h.size});
  }
  *devPtr = base;
  return orSuccess;
}

// [marker: ipc-close-handle]
orError_t closeImport(const char* call, void* devPtr) {
  State& s = state();
  const auto base = reinterpret_cast<std::uintptr_t>(devPtr);
  const auto notOpen = [call] {
    return fail(orErrorInvalidDevicePointer, call,
                "devPtr is not the start of memory opened with "
                "orIpcOpenMemHandle (or it was closed already)");
  };
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.imports.count(base) == 0) return notOpen();
  }
  // Work queued on any device may still use the memory; as orFree, never reports a task error.
  waitForAllDevices();
  std::lock_guard<std::mutex> lock(s.mutex);
  auto it = s.imports.find(base);
  if (it == s.imports.end()) return notOpen();  // closed by another thread meanwhile
  Import& import = it->second;
  if (import.device->memory.releaseImport(devPtr) != orSuccess) {
    return fail(
        orErrorMemoryAllocation, call,
        "mapping the own memory back failed (" + errnoText() + "); the shared memory stays open");
  }
  poisonMap().clear(base, import.size);
  std::uint64_t expected = word(import.serial, kOpen);
  import.slot.slot->word.compare_exchange_strong(expected, word(import.serial, kGivenBack),
                                                 std::memory_order_acq_rel);
  munmap(import.slot.page, kPage);
  s.imports.erase(it);
  return orSuccess;
}

// [marker: ipc-discard-handle]
orError_t discardHandle(const char* call, const orIpcMemHandle_t& handle) {
  HandleData h;
  if (!decode(handle, &h)) return notAHandle(call);
  // An importer may hold a handle unopened while it uses the allocation through another mapping
  // of it (the PyTorch layer does): work queued on it must be done before the exporter may reuse
  // the memory. As orIpcCloseMemHandle, never reports a task failure.
  if (h.pid != getpid()) waitForAllDevices();
  Slot* slot = nullptr;
  MappedSlot mapped;
  orError_t e = slotOf(call, h, &slot, &mapped);
  if (e == orSuccess) e = transition(call, *slot, h.serial, kUnopened, kGivenBack);
  if (mapped.page != nullptr) munmap(mapped.page, kPage);
  if (e == orSuccess && h.pid == getpid()) collectRetired();
  return e;
}

// [marker: ipc-query-handle]
orError_t queryHandle(const char* call, const orIpcMemHandle_t& handle) {
  HandleData h;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!decode(handle, &h) || h.pid != getpid() || s.table == nullptr ||
      h.tableInode != s.tableInode) {
    return fail(orErrorInvalidValue, call, "handle is not an IPC handle made by this process");
  }
  collectLocked(s);
  const std::uint64_t w = s.table[h.slot].word.load(std::memory_order_acquire);
  return (w >> 2) == h.serial ? orErrorNotReady : orSuccess;
}

orError_t describeHandle(const char* call, const orIpcMemHandle_t& handle,
                         orIpcMemHandleInfo* info) {
  HandleData h;
  if (!decode(handle, &h)) return notAHandle(call);
  info->device = h.device;
  info->exporterPid = h.pid;
  info->memoryId = h.memoryInode;
  info->offset = h.offset;
  info->size = h.size;
  info->serial = h.serial;
  return orSuccess;
}

}  // namespace openreg::ipc
