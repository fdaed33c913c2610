// The operators every backend needs before tensors can exist, registered for PrivateUse1:
// factories, views, resize, set_, copies, scalars, fill. Thin wrappers: the work is in
// ATen's generic implementations, Copy.cpp and core/Storage.cpp.
#include <ATen/Context.h>
#include <ATen/EmptyTensor.h>
#include <ATen/core/Tensor.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_local_scalar_dense.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <c10/core/CPUAllocator.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include "aten/Copy.h"
#include "aten/EmptyTensor.h"
#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Exception.h"
#include "core/Functions.h"
#include "core/OpenRegStream.h"
#include "core/Storage.h"
#include "core/allocator/DeviceAllocator.h"

namespace openreg {
namespace {

// Kernels registered with m.impl get no DeviceGuard from codegen (in-tree backends do): the
// factories switch to the requested device themselves, since the allocator uses the current one.
c10::DeviceIndex targetDevice(std::optional<at::Device> device) {
  return device.has_value() && device->has_index() ? device->index() : current_device();
}

// [marker: factory-errors]
// A factory's errors (a bad device index, a negative or overflowing size, out of memory) come from
// ATen's generic code and the allocator, in the CPU's words, which name neither the operator nor
// the device. They keep their type and words and gain that context: "Trying to create tensor with
// negative dimension -1: [-1] (openreg: aten::empty.memory_format on openreg:0)".
template <class F>
at::Tensor factory(const char* op, std::optional<at::Device> device, F&& make) {
  try {
    return make();
  } catch (c10::Error& e) {
    const c10::DeviceIndex index = device.has_value() && device->has_index() ? device->index() : -1;
    TORCH_RETHROW(e, OR_DEVICE_NAME ": ", op, " on ",
                  c10::Device(c10::DeviceType::PrivateUse1, index));
  }
}

// As the CPU's and CUDA's factories: in deterministic mode (with
// torch.utils.deterministic.fill_uninitialized_memory, on by default) new memory reads as NaN, or
// an integer type's largest value, instead of whatever the block held. The fill is a queued task.
bool fillsUninitialized() {
  const auto& context = at::globalContext();
  return context.deterministicAlgorithms() && context.deterministicFillUninitializedMemory();
}

at::Tensor fillIfDeterministic(at::Tensor t) {
  if (C10_UNLIKELY(fillsUninitialized())) at::native::fill_empty_deterministic_(t);
  return t;
}

// The tensor options the device's factories refuse.
void checkFactoryOptions(std::optional<at::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(!pin_memory.value_or(false), OR_DEVICE_NAME ": only CPU tensors can be pinned");
  TORCH_CHECK(layout.value_or(at::kStrided) == at::kStrided,
              OR_DEVICE_NAME ": only strided tensors are supported");
}

at::Tensor empty(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                 std::optional<at::Layout> layout, std::optional<at::Device> device,
                 std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  return factory("aten::empty.memory_format", device, [&] {
    checkFactoryOptions(layout, pin_memory);
    DeviceScope scope(targetDevice(device));
    return fillIfDeterministic(emptyOnDevice(size, c10::dtype_or_default(dtype), memory_format));
  });
}

// [marker: empty-strided]
at::Tensor emptyStrided(c10::IntArrayRef size, c10::IntArrayRef stride,
                        std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                        std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return factory("aten::empty_strided", device, [&] {
    checkFactoryOptions(layout, pin_memory);
    DeviceScope scope(targetDevice(device));
    return fillIfDeterministic(emptyStridedOnDevice(size, stride, c10::dtype_or_default(dtype)));
  });
}

// [marker: resize]
const at::Tensor& resize(const at::Tensor& self, c10::IntArrayRef size,
                         std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  // As ATen's resize_: a tensor that already has the size keeps its strides. Made contiguous, a
  // strided view (the out= of torch.full((4,), 7., out=base[:, 3])) was then written contiguously
  // from its offset, over elements outside the view.
  if (self.sizes() != size) {
    impl->set_sizes_contiguous(size);
    const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(),
                                                                     impl->storage_offset());
    const size_t before = impl->storage().nbytes();
    if (needed > before) {
      resizeStorageBytes(impl->storage().unsafeGetStorageImpl(), needed);
      if (C10_UNLIKELY(fillsUninitialized()))
        at::native::fill_resize_deterministic_(self, static_cast<int64_t>(before));
    }
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve,
                OR_DEVICE_NAME ": unsupported memory format for resize_: Preserve");
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

// [marker: set-storage]
at::Tensor& setStorageOffset(at::Tensor& self, c10::Storage source, int64_t storage_offset,
                             c10::IntArrayRef size, c10::IntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(), OR_DEVICE_NAME ": set_: the storage is on ",
              source.device(), " but the tensor on ", self.device());
  TORCH_CHECK(storage_offset >= 0, OR_DEVICE_NAME ": set_: negative storage offset ",
              storage_offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!impl->storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(storage_offset);
  if (stride.empty()) {
    impl->set_sizes_contiguous(size);
  } else {
    TORCH_CHECK(size.size() == stride.size(), OR_DEVICE_NAME ": set_: ", size.size(), " sizes but ",
                stride.size(), " strides");
    impl->set_sizes_and_strides(size, stride);
  }
  const size_t itemsize = self.dtype().itemsize();
  const size_t needed =
      stride.empty() ? at::detail::computeStorageNbytesContiguous(size, itemsize, storage_offset)
                     : at::detail::computeStorageNbytes(size, stride, itemsize, storage_offset);
  if (needed > impl->storage().nbytes())
    resizeStorageBytes(impl->storage().unsafeGetStorageImpl(), needed);
  return self;
}

at::Tensor& setStorage(at::Tensor& self, c10::Storage source) {
  const int64_t elements = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return setStorageOffset(self, std::move(source), 0, {elements}, {});
}

at::Tensor& setTensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return setStorageOffset(self, source.storage(), source.storage_offset(), source.sizes(),
                          source.strides());
}

at::Tensor& setEmpty(at::Tensor& self) {
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, &deviceAllocator(), /*resizable=*/true);
  return setStorageOffset(self, std::move(storage), 0, {0}, {});
}

at::Scalar localScalarDense(const at::Tensor& self) {
  return at::_local_scalar_dense(self.to(at::kCPU));  // a blocking copy: synchronizes the stream
}

// [marker: fill]
at::Tensor& fill(at::Tensor& self, const at::Scalar& value) {
  if (self.numel() == 0) return self;
  launchOnCurrentStream(self.device(), "aten::fill_", {}, {self},
                        [alias = kernelAlias(self), value]() mutable { alias.fill_(value); });
  return self;
}

at::Tensor& zero(at::Tensor& self) {
  return fill(self, 0);
}

// [marker: record-stream]
void recordStream(at::Tensor& self, at::Stream stream) {
  TORCH_CHECK(stream.device_type() == c10::DeviceType::PrivateUse1,
              OR_DEVICE_NAME ": record_stream needs an openreg stream, got one of ",
              stream.device_type());
  deviceAllocator().recordStream(self.storage().data_ptr(), stream);
}

}  // namespace

// [marker: minimal-registrations]
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("empty.memory_format", OPENREG_NATIVE(empty));
  m.impl("empty_strided", OPENREG_NATIVE(emptyStrided));
  m.impl("as_strided", OPENREG_NATIVE(at::native::as_strided_tensorimpl));
  m.impl("view", OPENREG_NATIVE(at::native::view));
  m.impl("_reshape_alias", OPENREG_NATIVE(at::native::_reshape_alias));
  m.impl("view_as_real", OPENREG_NATIVE(at::native::view_as_real));
  m.impl("view_as_complex", OPENREG_NATIVE(at::native::view_as_complex));
  m.impl("unfold", OPENREG_NATIVE(at::native::unfold));
  m.impl("resize_", OPENREG_NATIVE(resize));
  m.impl("set_.source_Storage", OPENREG_NATIVE(setStorage));
  m.impl("set_.source_Storage_storage_offset", OPENREG_NATIVE(setStorageOffset));
  m.impl("set_.source_Tensor", OPENREG_NATIVE(setTensor));
  m.impl("set_", OPENREG_NATIVE(setEmpty));
  m.impl("_copy_from", OPENREG_NATIVE(copyFrom));
  m.impl("_copy_from_and_resize", OPENREG_NATIVE(copyFromAndResize));
  m.impl("_local_scalar_dense", OPENREG_NATIVE(localScalarDense));
  m.impl("fill_.Scalar", OPENREG_NATIVE(fill));
  m.impl("zero_", OPENREG_NATIVE(zero));
  m.impl("record_stream", OPENREG_NATIVE(recordStream));
  // Compares storages and geometry, which the engine's aliases of the two tensors never share.
  m.impl("is_set_to", OPENREG_NATIVE(at::native::is_set_to));
}

}  // namespace openreg

namespace openreg {

// [marker: copy-conj-fallthrough]
// A copy from a conjugate or negative view would otherwise be intercepted by PyTorch's
// Conjugate/Negative fallbacks, which materialize the view with clone(), which copies, which
// calls _copy_from again: an infinite recursion for any device but the CPU and CUDA. Our copy
// keeps the bits on its aliases and lets the CPU's copy_ resolve them, so it needs no help.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

}  // namespace openreg
