#include "aten/engine/Quantized.h"

#include <c10/util/Exception.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <cctype>
#include <optional>
#include <string>

#include "aten/engine/Arguments.h"
#include "core/Functions.h"

namespace openreg::engine {
namespace {

// torch.qint8 for QInt8: Python's name, which the caller wrote.
std::string pythonName(c10::ScalarType dtype) {
  std::string name = c10::toString(dtype);
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "torch." + name;
}

[[noreturn]] void refuse(const c10::OperatorHandle& op, c10::ScalarType dtype, c10::Device device) {
  TORCH_CHECK_NOT_IMPLEMENTED(
      false, OR_DEVICE_NAME ": ", op.schema().operator_name(), " with the quantized dtype ",
      pythonName(dtype), " on ", device,
      ": quantized tensors are not supported on openreg. Quantize on the CPU instead: call it on "
      "tensor.cpu(), and bring float results back with .dequantize().to(\"" OR_DEVICE_NAME "\").");
}

std::optional<c10::ScalarType> quantizedTensorDtype(const c10::IValue& value) {
  std::optional<c10::ScalarType> found;
  forEachTensor(value, [&](const at::Tensor& t) {
    if (!found && t.defined() && c10::isQIntType(t.scalar_type())) found = t.scalar_type();
  });
  return found;
}

// A ScalarType or ScalarType? argument (boxed as an int).
bool isScalarTypeArgument(const c10::Argument& argument) {
  c10::TypePtr type = argument.real_type();
  if (const auto* optional = type->castRaw<c10::OptionalType>()) type = optional->getElementType();
  return type->kind() == c10::TypeKind::ScalarTypeType;
}

// The device a fallback call is for: its first openreg tensor's, else its device argument's,
// else the current device.
c10::Device deviceOf(c10::ArrayRef<c10::IValue> args) {
  std::optional<c10::Device> device;
  for (const c10::IValue& arg : args) {
    forEachTensor(arg, [&](const at::Tensor& t) {
      if (!device && isOpenReg(t)) device = t.device();
    });
    if (!device && arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1)
      device = arg.toDevice();
  }
  if (device && device->has_index()) return *device;
  return c10::Device(c10::DeviceType::PrivateUse1, current_device());
}

// [marker: quantized-fallback]
void refuseQuantizedCall(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto args = torch::jit::last(*stack, op.schema().arguments().size());
  const c10::Device device = deviceOf(args);
  refuseQuantizedArguments(op, args, device);
  refuse(op, c10::ScalarType::QInt8, device);  // unreachable in practice: PyTorch came here for one
}

}  // namespace

// [marker: quantized-refusal]
void refuseQuantizedArguments(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              c10::Device device) {
  const auto& arguments = op.schema().arguments();
  for (size_t i = 0; i < args.size(); ++i) {
    if (auto dtype = quantizedTensorDtype(args[i])) refuse(op, *dtype, device);
    if (args[i].isInt() && i < arguments.size() && isScalarTypeArgument(arguments[i])) {
      const auto dtype = static_cast<c10::ScalarType>(args[i].toInt());
      if (c10::isQIntType(dtype)) refuse(op, dtype, device);
    }
  }
}

void refuseQuantizedResults(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> results,
                            c10::Device device) {
  for (const c10::IValue& result : results) {
    if (auto dtype = quantizedTensorDtype(result)) refuse(op, *dtype, device);
  }
}

TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&refuseQuantizedCall>());
}

}  // namespace openreg::engine
