#include "core/Serialization.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <torch/csrc/jit/serialization/pickler_helper.h>

#include <algorithm>
#include <string_view>

namespace openreg {

c10::intrusive_ptr<c10::BackendMeta> BackendMeta::clone(
    const c10::intrusive_ptr<c10::BackendMeta>& /*ptr*/) const {
  auto copy = c10::make_intrusive<BackendMeta>();
  copy->flags = flags;
  return copy;
}

// [marker: backend-meta-save]
void saveBackendMeta(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  const auto* meta =
      dynamic_cast<const BackendMeta*>(tensor.unsafeGetTensorImpl()->get_backend_meta());
  if (meta == nullptr) return;
  for (const auto& [name, value] : meta->flags) metadata[name] = value;
}

// [marker: backend-meta-load]
void loadBackendMeta(const at::Tensor& tensor, std::unordered_map<std::string, bool>& metadata) {
  if (metadata.empty()) return;
  c10::TensorImpl* impl = tensor.unsafeGetTensorImpl();
  auto* existing = dynamic_cast<BackendMeta*>(impl->get_backend_meta());
  c10::intrusive_ptr<BackendMeta> meta = c10::make_intrusive<BackendMeta>();
  if (existing != nullptr) meta->flags = existing->flags;
  for (const auto& [name, value] : metadata) {
    TORCH_CHECK(std::string_view(name).starts_with(kBackendMetaPrefix) ||
                    std::ranges::find(kReferenceBackendMetaNames, name) !=
                        std::end(kReferenceBackendMetaNames),
                OR_DEVICE_NAME ": tensor metadata '", name, "' for a tensor on ", tensor.device(),
                " is not openreg backend metadata: openreg's names start with '",
                kBackendMetaPrefix,
                "' or are 'version_number' or 'format_number' (PyTorch's own are 'conj' and "
                "'neg')");
    meta->flags[name] = value;
  }
  impl->set_backend_meta(std::move(meta));
}

namespace {
// [marker: backend-meta-registration]
const bool gRegistered = [] {
  torch::jit::TensorBackendMetaRegistry(c10::DeviceType::PrivateUse1, &saveBackendMeta,
                                        &loadBackendMeta);
  return true;
}();
}  // namespace

}  // namespace openreg
