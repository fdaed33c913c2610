// Convolution on openreg. ATen sends convolutions on backends other than CPU/CUDA to
// convolution_overrideable and convolution_backward_overrideable, which a backend implements:
// here, output shapes come from ATen's convolution on Meta tensors, and one task runs ATen's CPU
// convolution on kernel-window aliases (KernelAlias.h) and writes the result into the output.
//
// Note [Convolution layouts]
// The CPU's convolution returns its output, and convolution_backward its grad_input and
// grad_weight, in the memory format of the backend it picks for the input and the weight: oneDNN
// and the 2-d slow kernels work channels-last when the input or the weight is channels-last, the
// 3-d slow kernels and every 1-d convolution contiguous. The layout is part of the result: what
// follows a convolution computes in its input's layout (batch norm reduces a channels-last
// activation in another order than a contiguous one), so a contiguous output where the CPU's is
// channels-last makes a channels-last CNN drift from the CPU in the last bits. So the outputs
// here are allocated in the format ATen's own choice gives (select_conv_backend, then
// _determine_backend_memory_format), asked about the kernel aliases: CPU tensors with the device
// tensors' sizes, strides and dtype, the very tensors the task's kernel then runs on.
#include <ATen/core/Tensor.h>
#include <ATen/native/ConvUtils.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <torch/library.h>

#include <array>
#include <optional>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Functions.h"

namespace openreg {
namespace {

// [marker: convolution-layout]
// The memory format of the CPU's convolution output and gradients for these kernel aliases. See
// Note [Convolution layouts].
at::MemoryFormat cpuMemoryFormat(const at::Tensor& in, const at::Tensor& w,
                                 const std::optional<at::Tensor>& b,
                                 at::OptionalIntArrayRef biasSizes, c10::IntArrayRef stride,
                                 c10::IntArrayRef padding, c10::IntArrayRef dilation,
                                 bool transposed, c10::IntArrayRef outputPadding, int64_t groups) {
  const at::native::ConvBackend backend = at::native::select_conv_backend(
      in, w, b, c10::fromIntArrayRefSlow(stride), c10::fromIntArrayRefSlow(padding),
      c10::fromIntArrayRefSlow(dilation), transposed, c10::fromIntArrayRefSlow(outputPadding),
      c10::SymInt(groups),
      biasSizes ? at::OptionalSymIntArrayRef(c10::fromIntArrayRefSlow(*biasSizes)) : std::nullopt);
  return at::native::_determine_backend_memory_format(in, w, backend);
}

// [marker: convolution]
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  DeviceScope scope(input.device().index());
  const bool hasBias = bias.has_value() && bias->defined();
  const at::Tensor shape =
      at::convolution(metaLike(input), metaLike(weight),
                      hasBias ? std::optional<at::Tensor>(metaLike(*bias)) : std::nullopt, stride,
                      padding, dilation, transposed, output_padding, groups);
  at::Tensor in = kernelAlias(input), w = kernelAlias(weight);
  std::optional<at::Tensor> b =
      hasBias ? std::optional<at::Tensor>(kernelAlias(*bias)) : std::nullopt;
  const at::MemoryFormat format =
      cpuMemoryFormat(in, w, b, hasBias ? at::OptionalIntArrayRef(bias->sizes()) : std::nullopt,
                      stride, padding, dilation, transposed, output_padding, groups);
  at::Tensor out =
      at::empty(shape.sizes(), shape.options().device(input.device()).memory_format(format));
  if (out.numel() == 0) return out;
  launchOnCurrentStream(
      input.device(), "aten::convolution", {input, weight, hasBias ? *bias : at::Tensor()}, {out},
      [out = kernelAlias(out), in = std::move(in), w = std::move(w), b = std::move(b),
       stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(), transposed,
       outputPadding = output_padding.vec(), groups]() mutable {
        out.copy_(at::convolution(in, w, b, stride, padding, dilation, transposed, outputPadding,
                                  groups));
      });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  DeviceScope scope(input.device().index());
  const int64_t outChannels = transposed ? weight.size(1) * groups : weight.size(0);
  at::Tensor in = kernelAlias(input), w = kernelAlias(weight);
  const std::vector<int64_t> biasSizes{outChannels};
  const at::MemoryFormat format = cpuMemoryFormat(in, w, std::nullopt, biasSizes, stride, padding,
                                                  dilation, transposed, output_padding, groups);
  at::Tensor gradInput = output_mask[0]
                             ? at::empty(input.sizes(), input.options().memory_format(format))
                             : at::Tensor();
  at::Tensor gradWeight = output_mask[1]
                              ? at::empty(weight.sizes(), weight.options().memory_format(format))
                              : at::Tensor();
  at::Tensor gradBias = output_mask[2] ? at::empty({outChannels}, weight.options()) : at::Tensor();
  launchOnCurrentStream(
      input.device(), "aten::convolution_backward", {grad_output, input, weight},
      {gradInput, gradWeight, gradBias},
      [gi = kernelAlias(gradInput), gw = kernelAlias(gradWeight), gb = kernelAlias(gradBias),
       go = kernelAlias(grad_output), in = std::move(in), w = std::move(w), stride = stride.vec(),
       padding = padding.vec(), dilation = dilation.vec(), transposed,
       outputPadding = output_padding.vec(), groups, output_mask, outChannels]() mutable {
        auto [dInput, dWeight, dBias] =
            at::convolution_backward(go, in, w, std::vector<int64_t>{outChannels}, stride, padding,
                                     dilation, transposed, outputPadding, groups, output_mask);
        if (gi.defined()) gi.copy_(dInput);
        if (gw.defined()) gw.copy_(dWeight);
        if (gb.defined()) gb.copy_(dBias);
      });
  return {gradInput, gradWeight, gradBias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("convolution_overrideable", OPENREG_NATIVE(convolution));
  m.impl("convolution_backward_overrideable", OPENREG_NATIVE(convolutionBackward));
}

}  // namespace openreg
