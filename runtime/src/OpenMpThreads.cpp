#include "OpenMpThreads.h"

#include <dlfcn.h>

#include <atomic>

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

}  // namespace

void releaseOpenMpThreads() noexcept {
  if (PauseAll fn = pauseAll()) fn(kOmpPauseSoft);  // -1 inside a parallel region: nothing to do
}

}  // namespace openreg
