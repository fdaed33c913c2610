// Private pools of the device caching allocator: where a graph capture's allocations go.
//
// Note [Private pools]
// A captured graph replays its tasks on the addresses they had at capture, so the memory its
// allocations got must stay the graph's for as long as the graph can be replayed: no eager
// allocation may reuse it, even after the tensors that held it are freed. While a capture is in
// progress, every allocation made on one of its streams (the capturing stream and those forked
// off it: the runtime says which, orStreamGetCaptureInfo) comes from the capture's private pool
// instead of the device's shared pools; blocks freed during the capture return to that pool and
// serve later allocations of the same capture (safe, since a replay runs the tasks in capture
// order: Note [Graph replay] in runtime/src/Graph.h). A pool is named by a c10::MempoolId_t;
// graphs given the same id share it, and each graph holds one use of it. When the last use goes
// (reset(), or the graph's destruction) the pool's wholly free segments return to the runtime at
// once; segments still holding live tensors follow once those are freed, at the next
// empty_cache(). Private segments count in the device's statistics like any other, and per pool
// in reserved_bytes_by_private_pools.
// Under the strict capture modes an allocation on this device from a stream outside the capture
// raises (from any thread in "global" mode, from the capturing thread in "thread_local" mode):
// it would come from the shared pool, which the graph's memory never mixes with, and CUDA's
// modes forbid such calls the same way. "relaxed" serves it from the shared pool.
#pragma once

#include <c10/core/Allocator.h>
#include <openreg/runtime.h>

#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "core/allocator/Block.h"

namespace openreg::allocator {

struct PrivatePool {
  explicit PrivatePool(c10::MempoolId_t id) : id(id) {
    small.owner = this;
    large.owner = this;
  }
  const c10::MempoolId_t id;
  BlockPool small{true};
  BlockPool large{false};
  int useCount = 0;  // graphs (or captures in progress) holding the pool
  int segments = 0;  // segments the pool holds
};

// A capture in progress that allocates into a pool, or (captureId 0) a thread that does
// (use_mem_pool).
struct PoolCapture {
  c10::MempoolId_t pool;
  unsigned long long captureId;  // the runtime's id of the capture; 0 for a thread's route
  orStreamCaptureMode mode;
  std::thread::id thread;  // the capturing thread
};

struct PrivatePools {
  std::map<c10::MempoolId_t, std::unique_ptr<PrivatePool>> pools;
  std::vector<PoolCapture> captures;
};

}  // namespace openreg::allocator
