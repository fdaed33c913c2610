// Quantized tensors on openreg: refused at the call.
//
// Note [No quantized tensors]
// openreg has no quantized tensors: its allocator, copies and the engine's outputs are plain
// dense tensors, and a quantized tensor carries a Quantizer the device layer never makes. Without
// a refusal, an operator asked for one went wrong quietly: quantize_per_tensor's Meta kernel
// announces a float32 result, so the engine queued a task whose CPU kernel then failed to copy its
// quantized result into that output, the call returned a float32 tensor, and the task's error
// surfaced at a later, unrelated call.
// So one check refuses, before anything is allocated or queued, every call that involves a
// quantized dtype: the engine checks a call's arguments (a tensor of a quantized dtype, or a
// ScalarType argument naming one) and its Meta answer's results whenever it asks the Meta kernel,
// and the arguments again on the synchronizing path. A signature found in the shape cache needs
// no check (dtypes and integer arguments are part of it, and a refused call is never
// remembered), so the per-call cost of the common path is nothing. The QuantizedPrivateUse1
// dispatch key, which PyTorch picks for factories asked for a quantized dtype on openreg
// (torch.empty(..., dtype=torch.qint8), _empty_affine_quantized, x.to(torch.qint8)), gets a
// fallback that raises the same error. It is a NotImplementedError that names the operator, the
// dtype and the device, and says to quantize on the CPU.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>

namespace openreg::engine {

// Throws c10::NotImplementedError if one of `args` is a tensor of a quantized dtype or (for the
// operator's ScalarType arguments) names a quantized dtype.
void refuseQuantizedArguments(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                              c10::Device device);
// The same for the tensors among an operator's results (a Meta kernel's answer).
void refuseQuantizedResults(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> results,
                            c10::Device device);

}  // namespace openreg::engine
