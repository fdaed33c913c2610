// Convolution on openreg. ATen sends convolutions on backends other than CPU/CUDA to
// convolution_overrideable and convolution_backward_overrideable, which a backend implements:
// here, output shapes come from ATen's convolution on Meta tensors, and one task runs ATen's CPU
// convolution on kernel-window aliases (KernelAlias.h) and writes the result into the output.
#include <ATen/core/Tensor.h>
#include <ATen/ops/convolution.h>
#include <ATen/ops/convolution_backward.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty_strided.h>
#include <torch/library.h>

#include <array>
#include <optional>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/engine/Ledger.h"
#include "core/Functions.h"

namespace openreg {
namespace {

at::Tensor emptyLike(const at::Tensor& meta, const at::Tensor& onDevice) {
  return at::empty_strided(meta.sizes(), meta.strides(), meta.options().device(onDevice.device()));
}

// [marker: convolution]
at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight,
                       const std::optional<at::Tensor>& bias, c10::IntArrayRef stride,
                       c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
                       c10::IntArrayRef output_padding, int64_t groups) {
  engine::count(engine::Path::Native);
  DeviceScope scope(input.device().index());
  const bool hasBias = bias.has_value() && bias->defined();
  const at::Tensor shape =
      at::convolution(metaLike(input), metaLike(weight),
                      hasBias ? std::optional<at::Tensor>(metaLike(*bias)) : std::nullopt, stride,
                      padding, dilation, transposed, output_padding, groups);
  at::Tensor out = emptyLike(shape, input);
  if (out.numel() == 0) return out;
  launchOnCurrentStream(input.device(), "aten::convolution",
                        {input, weight, hasBias ? *bias : at::Tensor()}, {out},
                        [out = kernelAlias(out), in = kernelAlias(input), w = kernelAlias(weight),
                         b = hasBias ? std::optional<at::Tensor>(kernelAlias(*bias)) : std::nullopt,
                         stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(),
                         transposed, outputPadding = output_padding.vec(), groups]() mutable {
                          out.copy_(at::convolution(in, w, b, stride, padding, dilation, transposed,
                                                    outputPadding, groups));
                        });
  return out;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolutionBackward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight,
    c10::IntArrayRef stride, c10::IntArrayRef padding, c10::IntArrayRef dilation, bool transposed,
    c10::IntArrayRef output_padding, int64_t groups, std::array<bool, 3> output_mask) {
  engine::count(engine::Path::Native);
  DeviceScope scope(input.device().index());
  at::Tensor gradInput = output_mask[0] ? at::empty_like(input) : at::Tensor();
  at::Tensor gradWeight = output_mask[1] ? at::empty_like(weight) : at::Tensor();
  const int64_t outChannels = transposed ? weight.size(1) * groups : weight.size(0);
  at::Tensor gradBias = output_mask[2] ? at::empty({outChannels}, weight.options()) : at::Tensor();
  launchOnCurrentStream(
      input.device(), "aten::convolution_backward", {grad_output, input, weight},
      {gradInput, gradWeight, gradBias},
      [gi = kernelAlias(gradInput), gw = kernelAlias(gradWeight), gb = kernelAlias(gradBias),
       go = kernelAlias(grad_output), in = kernelAlias(input), w = kernelAlias(weight),
       stride = stride.vec(), padding = padding.vec(), dilation = dilation.vec(), transposed,
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
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolutionBackward));
}

}  // namespace openreg
