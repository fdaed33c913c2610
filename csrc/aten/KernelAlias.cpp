#include "aten/KernelAlias.h"

#include <ATen/ops/_conj.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/from_blob.h>
#include <openreg/runtime.h>

#include "core/Exception.h"

namespace openreg {
namespace {

// A non-owning CPU view of `data` shaped like `like`, keeping its conjugate and negative bits
// (dropping them would silently change the values a kernel sees).
at::Tensor aliasLike(void* data, const at::Tensor& like) {
  at::Tensor alias = at::from_blob(
      data, like.sizes(), like.strides(), [](void*) {}, like.options().device(at::kCPU));
  if (like.is_conj()) alias = alias._conj();
  if (like.is_neg()) alias = alias._neg_view();
  return alias;
}

}  // namespace

// [marker: kernel-alias]
at::Tensor kernelAlias(const at::Tensor& deviceTensor) {
  void* kernelPtr = nullptr;
  if (deviceTensor.data_ptr() != nullptr) {
    OPENREG_CHECK(orGetKernelPointer(&kernelPtr, deviceTensor.data_ptr()));
  }
  return aliasLike(kernelPtr, deviceTensor);
}

at::Tensor hostAlias(const at::Tensor& hostTensor) {
  return aliasLike(hostTensor.data_ptr(), hostTensor);
}

at::Tensor metaLike(const at::Tensor& t) {
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(c10::kMeta));
}

}  // namespace openreg
