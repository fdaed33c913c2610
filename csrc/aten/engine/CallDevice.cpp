#include "aten/engine/CallDevice.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <optional>

#include "aten/engine/Arguments.h"
#include "core/Functions.h"
#include "core/Generator.h"

namespace openreg::engine {

// [marker: engine-device-check]
c10::Device findDevice(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> device;
  std::optional<c10::Device> other;
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    // A 0-dim CPU tensor is read as a scalar, but never written: as out= or in-place self it
    // would be an output on another device (CUDA's TensorIterator refuses it the same way).
    const auto* alias = i < arguments.size() ? arguments[i].alias_info() : nullptr;
    const bool written = alias != nullptr && alias->isWrite();
    forEachTensor(args[i], [&](const at::Tensor& t) {
      if (!t.defined()) return;
      if (isOpenReg(t)) {
        if (!device)
          device = t.device();
        else if (t.device() != *device && !other)
          other = t.device();
      } else if (!(t.device().is_cpu() && t.dim() == 0 && !written) && !other) {
        other = t.device();
      }
    });
  }
  if (!device) return c10::Device(c10::DeviceType::PrivateUse1, current_device());
  TORCH_CHECK(!other,
              "Expected all tensors to be on the same device, but found at least two devices, ",
              *device, " and ", *other, "! (openreg: ", op.schema().operator_name(), ")");
  return *device;
}

// [marker: engine-cpu-indices]
// Indexing operators (index, index_put_: a Tensor?[] of indices) accept CPU index tensors with
// openreg data, as CUDA does: the indices are copied to the data's device first.
// Python's indexing passes the dimensions it slices as undefined tensors, not as None
// (x[:, :, [0, 3]]).
// A uint8 mask is deprecated: ATen warns when it expands the indices, which on openreg is inside
// the task, after the call has returned. The warning is given here, at the call, as the CPU and
// CUDA give it, and the mask becomes the bool mask it stands for (nonzero is true).
void moveCpuIndices(const OpTraits& traits, torch::jit::Stack* stack, size_t nArgs) {
  auto needsWork = [](const c10::IValue& element) {
    if (!element.isTensor() || !element.toTensor().defined()) return false;
    const at::Tensor& t = element.toTensor();
    return t.device().is_cpu() || t.scalar_type() == at::kByte;
  };
  for (size_t index : traits.indexLists) {
    c10::IValue& arg = (*stack)[stack->size() - nArgs + index];
    if (!arg.isList()) continue;
    const auto elements = arg.toListRef();
    if (std::none_of(elements.begin(), elements.end(), needsWork)) continue;
    std::optional<c10::Device> device;
    for (const c10::IValue& other : torch::jit::last(*stack, nArgs)) {
      forEachTensor(other, [&](const at::Tensor& t) {
        if (!device && isOpenReg(t)) device = t.device();
      });
    }
    if (!device) return;
    c10::List<std::optional<at::Tensor>> moved;
    for (const c10::IValue& element : elements) {
      if (!element.isTensor() || !element.toTensor().defined()) {
        moved.push_back(std::nullopt);
        continue;
      }
      at::Tensor t = element.toTensor();
      if (t.device().is_cpu()) t = t.to(*device);
      if (t.scalar_type() == at::kByte) {
        TORCH_WARN(
            "indexing with dtype torch.uint8 is now deprecated, please use a dtype torch.bool "
            "instead.");
        t = t.to(at::kBool);
      }
      moved.push_back(t);
    }
    arg = moved;
  }
}

// An argument as a task may hold it: see Note [Tasks hold no Python-visible tensor] in
// KernelAlias.h. Device tensors become kernel aliases; CPU tensors (0-dim scalars, the only ones
// [marker: engine-cpu-generator]
// A kernel that draws from the CPU's default generator (no Generator argument) would give
// numbers from the wrong generator, on a worker, racing the host. Allowed only when it draws
// nothing: a dropout_p argument of 0 (attention without dropout).
void checkCpuGeneratorUse(const c10::OperatorHandle& op, const OpTraits& traits,
                          c10::ArrayRef<c10::IValue> args) {
  if (!traits.cpuGeneratorOnly) return;
  const auto& arguments = op.schema().arguments();
  bool drawsNothing = false;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() == "dropout_p" && args[i].isDouble())
      drawsNothing = args[i].toDouble() == 0.0;
  }
  TORCH_CHECK_NOT_IMPLEMENTED(drawsNothing, OR_DEVICE_NAME ": ", op.schema().operator_name(),
                              " draws from the CPU's default generator, not openreg's; it needs "
                              "an openreg kernel (see Note [Dropout] in csrc/aten/Dropout.cpp)");
}

at::Generator deviceGenerator(const c10::OperatorHandle& op, const c10::IValue& arg,
                              c10::Device device) {
  at::Generator generator = arg.isNone() ? getDefaultGenerator(device.index()) : arg.toGenerator();
  TORCH_CHECK(generator.device().type() == c10::DeviceType::PrivateUse1, OR_DEVICE_NAME ": ",
              op.schema().operator_name(),
              " on an openreg tensor needs an openreg generator, got one of ", generator.device());
  return generator;
}

}  // namespace openreg::engine
