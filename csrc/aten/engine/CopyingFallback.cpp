#include "aten/engine/CopyingFallback.h"

#include <ATen/native/CPUFallback.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <map>
#include <memory>
#include <mutex>

#include "aten/engine/Arguments.h"
#include "aten/engine/Ledger.h"

namespace openreg::engine {
namespace {

int64_t deviceBytes(c10::ArrayRef<c10::IValue> values) {
  int64_t bytes = 0;
  for (const c10::IValue& value : values) {
    forEachTensor(value, [&](const at::Tensor& t) {
      if (isOpenReg(t)) bytes += static_cast<int64_t>(t.nbytes());
    });
  }
  return bytes;
}

void routedKernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  copyingFallback(op, stack, "routed to the copying fallback");
}

// Canonical "aten::name.overload" and the handle, or an error naming the operator.
c10::OperatorHandle resolve(const std::string& name, std::string* canonical) {
  std::string qualified = name.find("::") == std::string::npos ? "aten::" + name : name;
  const auto dot = qualified.find('.', qualified.find("::"));
  c10::OperatorName operatorName{qualified.substr(0, dot),
                                 dot == std::string::npos ? "" : qualified.substr(dot + 1)};
  auto handle = c10::Dispatcher::singleton().findSchema(operatorName);
  TORCH_CHECK_VALUE(handle && operatorName.name.rfind("aten::", 0) == 0,
                    OR_DEVICE_NAME ": no aten operator named '", name,
                    "' to route to the copying fallback (expected e.g. 'aten::add.Tensor')");
  *canonical = c10::toString(operatorName);
  return *handle;
}

struct Routes {
  std::mutex mutex;
  std::map<std::string, std::unique_ptr<torch::Library>> libraries;  // one fragment per operator
};

Routes& routes() {
  static auto* instance = new Routes();  // immortal: registrations outlive static destruction
  return *instance;
}

}  // namespace

// [marker: copying-fallback]
void copyingFallback(const c10::OperatorHandle& op, torch::jit::Stack* stack, const char* why) {
  const auto& schema = op.schema();
  checkCopyingFallback(c10::toString(schema.operator_name()), why);
  count(Path::Copying);
  int64_t bytes = deviceBytes(torch::jit::last(*stack, schema.arguments().size()));
  ServedCall serving;  // its copies are part of this call (Note [Counting native calls])
  at::native::cpu_fallback(op, stack);
  bytes += deviceBytes(torch::jit::last(*stack, schema.returns().size()));
  countCopiedBytes(bytes);
}

// [marker: copying-route]
void routeToCopyingFallback(const std::string& name) {
  std::string canonical;
  const c10::OperatorHandle op = resolve(name, &canonical);
  auto& r = routes();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (r.libraries.count(canonical) != 0) return;
  auto library = std::make_unique<torch::Library>(
      torch::Library::IMPL, "aten", c10::DispatchKey::PrivateUse1, __FILE__, __LINE__);
  const std::string unqualified = canonical.substr(6);  // the fragment is aten already
  library->impl(unqualified.c_str(), torch::CppFunction::makeFromBoxedFunction<&routedKernel>());
  r.libraries.emplace(canonical, std::move(library));
}

void restoreFromCopyingFallback(const std::string& name) {
  std::string canonical;
  resolve(name, &canonical);
  auto& r = routes();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.libraries.erase(canonical);  // the fragment's destructor drops the registration
}

std::vector<std::string> operatorsOnCopyingFallback() {
  auto& r = routes();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& [name, library] : r.libraries) names.push_back(name);
  return names;
}

}  // namespace openreg::engine
