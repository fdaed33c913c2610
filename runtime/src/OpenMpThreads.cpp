#include "OpenMpThreads.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <string>

namespace openreg {
namespace {

using PauseAll = int (*)(int kind);
constexpr int kOmpPauseSoft = 1;  // omp_pause_soft in omp.h (OpenMP 5.0)

// libgomp's omp_pause_resource_all, or nullptr while libgomp is not loaded. The runtime does not
// link OpenMP: it finds the copy the process already has (torch's) by its soname, and never loads
// one. Once found, the reference RTLD_NOLOAD took keeps it loaded.
PauseAll pauseAll() {
  static std::atomic<PauseAll> found{nullptr};
  PauseAll fn = found.load(std::memory_order_acquire);
  if (fn != nullptr) return fn;
  void* gomp = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (gomp == nullptr) return nullptr;
  fn = reinterpret_cast<PauseAll>(dlsym(gomp, "omp_pause_resource_all"));
  if (fn == nullptr) {  // a libgomp older than OpenMP 5.0 (GCC 9)
    dlclose(gomp);
    return nullptr;
  }
  found.store(fn, std::memory_order_release);
  return fn;
}

// The descriptor holding this process's read lock, never closed. Set once, at initialization,
// while workers may already be asking aloneOnMachine().
std::atomic<int> gProcessLock{-1};
// In $TMPDIR (default /tmp): the processes that share a temporary directory are counted together.
std::string processLockPath() {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir != nullptr && *dir != '\0' ? dir : "/tmp") + "/openreg-processes.lock";
}
}  // namespace

void registerOpenregProcess() noexcept {
  if (gProcessLock.load(std::memory_order_acquire) >= 0) return;
  const int fd = open(processLockPath().c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return;
  fchmod(fd, 0666);  // whoever creates it: every user's processes take a read lock on it
  struct flock lock {};
  lock.l_type = F_RDLCK;
  lock.l_whence = SEEK_SET;
  lock.l_len = 1;
  if (fcntl(fd, F_SETLK, &lock) != 0) {
    close(fd);
    return;
  }
  gProcessLock.store(fd, std::memory_order_release);
}

bool aloneOnMachine() noexcept {
  const int fd = gProcessLock.load(std::memory_order_acquire);
  if (fd < 0) return true;
  struct flock probe {};
  probe.l_type = F_WRLCK;
  probe.l_whence = SEEK_SET;
  probe.l_len = 1;
  if (fcntl(fd, F_GETLK, &probe) != 0) return true;
  return probe.l_type == F_UNLCK;
}

void releaseOpenMpThreads() noexcept {
  if (PauseAll fn = pauseAll()) fn(kOmpPauseSoft);  // -1 inside a parallel region: nothing to do
}

}  // namespace openreg
