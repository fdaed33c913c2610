// Kernel-window aliases: how a task computes on device memory with ATen's own CPU kernels.
//
// kernelAlias(t) is a CPU tensor with t's sizes, strides and dtype whose data pointer is the
// kernel-window address of t's data (orGetKernelPointer). It owns nothing: the device tensor's
// storage keeps the memory alive, and stream order keeps it from being reused while a task that
// holds the alias is queued (see Note [Caching allocator]). Only tasks may touch an alias's data;
// creating it touches no data, so it is cheap and safe on the host.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/SmallVector.h>
#include <openreg/task.hpp>

#include "core/Macros.h"

namespace openreg {

// True for a defined tensor on an openreg device: the tensors that have kernel aliases.
inline bool isOpenReg(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// An undefined tensor (an absent optional argument or output) gives an undefined alias.
OPENREG_TORCH_API at::Tensor kernelAlias(const at::Tensor& deviceTensor);

// A kernel alias described rather than made: what a task needs to make it on the worker. The
// engine's tasks carry these, so the tensor objects of an alias are created and freed on the same
// thread (the worker), and the host pays for no tensor allocation per argument.
// [marker: kernel-alias-spec]
struct KernelAliasSpec {
  void* data = nullptr;  // kernel-window address
  c10::ScalarType dtype = c10::ScalarType::Undefined;
  bool conj = false;
  bool neg = false;
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
};
OPENREG_TORCH_API KernelAliasSpec describeKernelAlias(const at::Tensor& deviceTensor);
// The same, written into a spec in place (a task's own: no copy of its size vectors).
OPENREG_TORCH_API void describeKernelAlias(const at::Tensor& deviceTensor, KernelAliasSpec* spec);
OPENREG_TORCH_API at::Tensor makeKernelAlias(const KernelAliasSpec& spec);
// Gives back an alias of makeKernelAlias that its task is done with: kept for the thread's next
// alias of its dtype when nothing else holds it (Note [Recycled kernel aliases] in
// KernelAlias.cpp).
OPENREG_TORCH_API void recycleKernelAlias(at::Tensor&& alias);

// The memory a task reads or writes through a tensor, for Note [Poisoned memory] in
// runtime/src/Poison.h: the bytes between its first and last element. A write covers the range
// when the tensor is non-overlapping and dense (it then sets every byte). Undefined and empty
// tensors touch nothing (bytes 0). For a device tensor, its kernel alias or its KernelAliasSpec.
OPENREG_TORCH_API MemoryAccess memoryAccess(const at::Tensor& t, bool read, bool write);
OPENREG_TORCH_API MemoryAccess memoryAccess(const KernelAliasSpec& spec, bool read, bool write);

// [marker: tasks-hold-no-python-tensor]
// Note [Tasks hold no Python-visible tensor]
// A task runs on a device worker, which never holds the GIL. Dropping a reference to a tensor
// that has a Python object can need the GIL (PyTorch moves the object's ownership when the C++
// reference count changes), and the host may be holding the GIL while it waits for that very
// task: a deadlock. So a task captures only tensors made for it: kernel aliases of device tensors,
// hostAlias() of host tensors, and hostCopyForTask() of CPU tensors it keeps.
//
// hostAlias(t): a non-owning CPU tensor over t's memory, with t's sizes, strides, dtype and
// conjugate/negative bits. The caller keeps the memory alive until the task has run (it waits
// for the task, or the memory is pinned and protected by record_event).
OPENREG_TORCH_API at::Tensor hostAlias(const at::Tensor& hostTensor);

// hostCopyForTask(t): a fresh CPU tensor with t's values (conjugate and negative bits resolved;
// t's strides when they are dense, as clone() keeps them), allocated and filled without the
// dispatcher. t.clone() is not enough: under the
// Python dispatcher or a dispatch mode the clone passes through Python and keeps a Python object,
// and the task that drops it on a worker then needs the GIL (a deadlock seen in
// `make test-compile-long`: a compiled kernel's CPU scalar, dropped on the worker while the host
// waited for a copy with the GIL held).
OPENREG_TORCH_API at::Tensor hostCopyForTask(const at::Tensor& hostTensor);

// A Meta tensor with t's sizes, strides and dtype: what kernels are asked about to learn output
// shapes without touching data.
OPENREG_TORCH_API at::Tensor metaLike(const at::Tensor& t);

}  // namespace openreg
