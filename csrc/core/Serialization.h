// Per-tensor backend metadata of openreg, and how it travels through torch.save / torch.load.
//
// Note [Backend metadata]
// PyTorch lets a PrivateUse1 backend hang an object of its own on a TensorImpl
// (c10::BackendMeta, TensorImpl::set_backend_meta) for what sizes, strides and dtype cannot say;
// real accelerators keep a private storage format there. Serialization sees it through one pair
// of functions per device type (torch::jit::TensorBackendMetaRegistry): on save, the getter adds
// named booleans to the map that torch.save pickles with the tensor (after PyTorch's own "conj"
// and "neg"); on load, the setter receives what is left of that map once PyTorch has consumed its
// keys, for a tensor already rebuilt on its device. The map is the whole wire format, so openreg's
// metadata is a set of named flags, and every name starts with "openreg_", except the two flags
// PyTorch's in-tree reference backend of the same name defines ("version_number" and
// "format_number"), accepted as they are so that code written for it runs here.
//
// What this does not do:
// - The metadata belongs to one TensorImpl. Shallow copies (detach(), .data) clone it; views and
//   new tensors (clone(), to(), any operator's output) start without it.
// - A tensor loaded onto the CPU (map_location="cpu") drops it: the CPU has no setter.
// - Any other name without the prefix is refused with an error rather than dropped, so a typo in
//   torch._utils.set_tensor_metadata does not silently vanish.
// Registered at library load, once (a second registration is an error in PyTorch).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>

#include <map>
#include <string>
#include <unordered_map>

#include "core/Macros.h"

namespace openreg {

// The prefix every openreg metadata name carries, but for the in-tree reference's two flags.
inline constexpr const char* kBackendMetaPrefix = "openreg_";
inline constexpr const char* kReferenceBackendMetaNames[] = {"version_number", "format_number"};

struct OPENREG_TORCH_API BackendMeta final : public c10::BackendMeta {
  std::map<std::string, bool> flags;  // ordered: a tensor saves its flags in a stable order

  // A shallow copy gets its own flags: setting one on a detached tensor leaves the original alone.
  c10::intrusive_ptr<c10::BackendMeta> clone(
      const c10::intrusive_ptr<c10::BackendMeta>& ptr) const override;
};

// The serialization pair (Note [Backend metadata]). Exposed for the C++ tests; Python reaches
// them through torch._utils.get_tensor_metadata / set_tensor_metadata and torch.save / torch.load.
OPENREG_TORCH_API void saveBackendMeta(const at::Tensor& tensor,
                                       std::unordered_map<std::string, bool>& metadata);
OPENREG_TORCH_API void loadBackendMeta(const at::Tensor& tensor,
                                       std::unordered_map<std::string, bool>& metadata);

}  // namespace openreg
