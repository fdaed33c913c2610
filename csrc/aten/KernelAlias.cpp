#include "aten/KernelAlias.h"

#include <ATen/EmptyTensor.h>
#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/accumulate.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <array>
#include <utility>

#include "core/Exception.h"

namespace openreg {
namespace {

// Bytes from the first to the last element of a non-empty strided layout.
size_t extentBytes(c10::IntArrayRef sizes, c10::IntArrayRef strides, size_t itemsize) {
  int64_t last = 0;
  for (size_t d = 0; d < sizes.size(); ++d) last += (sizes[d] - 1) * strides[d];
  return static_cast<size_t>(last + 1) * itemsize;
}

// An alias's storage size: its layout's extent, 0 when it has no element.
size_t aliasBytes(c10::IntArrayRef sizes, c10::IntArrayRef strides, size_t itemsize) {
  return c10::multiply_integers(sizes) == 0 ? 0 : extentBytes(sizes, strides, itemsize);
}

// Every alias is made here: a non-owning CPU tensor over `data`, keeping the conjugate and negative
// bits (dropping them would silently change the values a kernel sees). No deleter and no context:
// the data pointer is made without a heap allocation. The storage and the tensor are constructed
// directly, as at::for_blob would make them, without its option handling: a task makes an alias
// per device tensor it touches, and for_blob's own work was a third of an alias's cost
// (docs/performance.md). A regrowable alias has resizable storage with the CPU allocator: an
// engine kernel that grows an output on its way (mse_loss.out computes elementwise into its result
// before reducing into it) gets host memory instead of failing, and the engine's task copies the
// final values back (Note [Regrown outputs] in engine/OutputRepair.cpp). Native kernels and host
// aliases have no such copy back, so their aliases fail to grow instead.
enum class Regrowth : bool { Refused, Allowed };

at::Tensor makeAlias(void* data, c10::IntArrayRef sizes, c10::IntArrayRef strides,
                     c10::ScalarType dtype, bool conj, bool neg, Regrowth regrowth) {
  const caffe2::TypeMeta meta = c10::scalarTypeToTypeMeta(dtype);
  const size_t bytes = aliasBytes(sizes, strides, meta.itemsize());
  const bool resizable = regrowth == Regrowth::Allowed;
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       c10::DataPtr(data, c10::Device(c10::kCPU)),
                       resizable ? c10::GetAllocator(c10::DeviceType::CPU) : nullptr, resizable);
  at::Tensor alias = at::detail::make_tensor<c10::TensorImpl>(
      std::move(storage), c10::DispatchKeySet(c10::DispatchKey::CPU), meta);
  alias.unsafeGetTensorImpl()->set_sizes_and_strides(sizes, strides);
  if (conj) alias = alias._conj();
  if (neg) alias = alias._neg_view();
  return alias;
}

at::Tensor aliasLike(void* data, const at::Tensor& like) {
  return makeAlias(data, like.sizes(), like.strides(), like.scalar_type(), like.is_conj(),
                   like.is_neg(), Regrowth::Refused);
}

void* kernelPointer(const at::Tensor& deviceTensor) {
  void* kernelPtr = nullptr;
  if (deviceTensor.data_ptr() != nullptr) {
    OPENREG_CHECK(orGetKernelPointer(&kernelPtr, deviceTensor.data_ptr()));
  }
  return kernelPtr;
}

}  // namespace

// [marker: kernel-alias]
at::Tensor kernelAlias(const at::Tensor& deviceTensor) {
  if (!deviceTensor.defined()) return at::Tensor();  // an absent optional tensor stays absent
  return aliasLike(kernelPointer(deviceTensor), deviceTensor);
}

void describeKernelAlias(const at::Tensor& deviceTensor, KernelAliasSpec* spec) {
  spec->data = kernelPointer(deviceTensor);
  spec->dtype = deviceTensor.scalar_type();
  spec->conj = deviceTensor.is_conj();
  spec->neg = deviceTensor.is_neg();
  spec->sizes.assign(deviceTensor.sizes().begin(), deviceTensor.sizes().end());
  spec->strides.assign(deviceTensor.strides().begin(), deviceTensor.strides().end());
}

KernelAliasSpec describeKernelAlias(const at::Tensor& deviceTensor) {
  KernelAliasSpec spec;
  describeKernelAlias(deviceTensor, &spec);
  return spec;
}

// [marker: recycled-kernel-aliases]
// Note [Recycled kernel aliases]
// A task makes a kernel alias, a TensorImpl and its StorageImpl, for each device tensor it
// touches, and drops them when its kernel returns: for a tiny operator, making and unmaking them
// was the largest part of the worker's instructions (docs/performance.md). So a task gives its
// aliases back (recycleKernelAlias), and the thread keeps, per dtype, a few that nothing else
// references: one strong and no weak reference to the tensor, one to its storage (no view of it
// survived the kernel), no conjugate or negative bit, no autograd metadata. The next alias of that
// dtype on the thread takes one and only sets what makeAlias would: the data pointer (which also
// drops host memory a regrown output took), the byte size, the allocator, the sizes and strides,
// offset 0. An alias never reaches Python (Note [Tasks hold no Python-visible tensor]), so nothing
// can tell a recycled one from a new one. Each thread keeps its own: no lock.
namespace {

constexpr size_t kRecycledPerDtype = 8;

using RecycledAliases = std::array<c10::SmallVector<at::Tensor, kRecycledPerDtype>,
                                   static_cast<size_t>(c10::ScalarType::NumOptions)>;

RecycledAliases& recycledAliases() {
  thread_local RecycledAliases aliases;
  return aliases;
}

}  // namespace

at::Tensor makeKernelAlias(const KernelAliasSpec& spec) {
  auto& kept = recycledAliases()[static_cast<size_t>(spec.dtype)];
  if (kept.empty() || spec.conj || spec.neg) {
    return makeAlias(spec.data, spec.sizes, spec.strides, spec.dtype, spec.conj, spec.neg,
                     Regrowth::Allowed);
  }
  at::Tensor alias = std::move(kept.back());
  kept.pop_back();
  c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(spec.data, c10::Device(c10::kCPU)));
  storage->set_nbytes(aliasBytes(spec.sizes, spec.strides, impl->dtype().itemsize()));
  storage->set_allocator(c10::GetAllocator(c10::DeviceType::CPU));
  storage->set_resizable(true);  // Regrowth::Allowed, as makeAlias gives a task's alias
  impl->set_storage_offset(0);
  impl->set_sizes_and_strides(spec.sizes, spec.strides);
  return alias;
}

void recycleKernelAlias(at::Tensor&& alias) {
  if (!alias.defined()) return;
  c10::TensorImpl* impl = alias.unsafeGetTensorImpl();
  if (alias.use_count() != 1 || alias.weak_use_count() != 1 || !impl->has_storage() ||
      impl->storage().use_count() != 1 || !impl->is_cpu() || impl->is_conj() || impl->is_neg() ||
      impl->is_wrapped_number() || impl->autograd_meta() != nullptr) {
    return;
  }
  auto& kept = recycledAliases()[static_cast<size_t>(alias.scalar_type())];
  if (kept.size() == kRecycledPerDtype) return;
  c10::StorageImpl* storage = impl->storage().unsafeGetStorageImpl();
  // A regrown output's host memory is given back now, not when the alias is next used.
  if (storage->data_ptr().get_deleter() != nullptr) {
    storage->set_data_ptr_noswap(c10::DataPtr(nullptr, c10::Device(c10::kCPU)));
  }
  kept.push_back(std::move(alias));
}

namespace {
// Non-overlapping and dense: the dimensions sorted by stride, each stride is the product of the
// smaller sizes (what TensorImpl caches for a tensor; a KernelAliasSpec has only the layout).
bool isDense(c10::IntArrayRef sizes, c10::IntArrayRef strides) {
  c10::SmallVector<std::pair<int64_t, int64_t>, 6> dims;  // (stride, size), size > 1 only
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1) dims.emplace_back(strides[d], sizes[d]);
  }
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}
}  // namespace

// [marker: memory-access]
MemoryAccess memoryAccess(const at::Tensor& t, bool read, bool write) {
  if (!t.defined() || t.numel() == 0) return {};
  // On the host, per native launch: the tensor's cached density, not isDense's sort.
  return {t.data_ptr(), extentBytes(t.sizes(), t.strides(), t.dtype().itemsize()), read, write,
          write && t.is_non_overlapping_and_dense()};
}

MemoryAccess memoryAccess(const KernelAliasSpec& spec, bool read, bool write) {
  if (spec.data == nullptr || c10::multiply_integers(spec.sizes) == 0) return {};
  return {spec.data, extentBytes(spec.sizes, spec.strides, c10::elementSize(spec.dtype)), read,
          write, write && isDense(spec.sizes, spec.strides)};
}

at::Tensor hostAlias(const at::Tensor& hostTensor) {
  return aliasLike(hostTensor.data_ptr(), hostTensor);
}

at::Tensor hostCopyForTask(const at::Tensor& hostTensor) {
  TORCH_INTERNAL_ASSERT(hostTensor.is_cpu(), OR_DEVICE_NAME ": hostCopyForTask takes a CPU tensor");
  const at::Tensor src = hostTensor.resolve_conj().resolve_neg();
  at::Tensor out =
      src.is_non_overlapping_and_dense()
          ? at::detail::empty_strided_cpu(src.sizes(), src.strides(), src.scalar_type())
          : at::detail::empty_cpu(src.sizes(), src.scalar_type());
  at::native::copy_(out, src);  // the CPU kernel itself: no dispatcher, no Python
  // A wrapped number (the 1.0 of `t + 1.0`) promotes as a Python scalar: int64 + 1.0 computes in
  // float32. Copied as a plain 0-dim float64 tensor it made the kernel compute in float64, and
  // 16777217 + 1.0 gave 16777218 where the CPU gives 16777216.
  if (hostTensor.unsafeGetTensorImpl()->is_wrapped_number())
    out.unsafeGetTensorImpl()->set_wrapped_number(true);
  return out;
}

at::Tensor metaLike(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

}  // namespace openreg
