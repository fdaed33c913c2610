// The fused recurrent cells ATen calls on accelerators.
//
// Note [Fused recurrent cells]
// ATen's LSTM and GRU cells compute gates with matmuls and then, on CUDA, XPU and PrivateUse1
// (hard-coded in aten/src/ATen/native/RNN.cpp), call one fused elementwise operator per step:
// _thnn_fused_lstm_cell and _thnn_fused_gru_cell, with backward operators of their own. ATen has
// kernels for them only on CUDA, so without these nn.LSTM, nn.LSTMCell, nn.GRU and nn.GRUCell do
// not run on openreg. These kernels compose the same elementwise math from ATen operators on
// openreg tensors (each one a stream task). The workspace layouts are CUDA's: activated gates for
// the LSTM; reset, input and new gates, the previous hidden state and the hidden new-gate part for
// the GRU. The CPU itself runs the unfused cell (biases added inside the matmuls), which rounds
// differently: results are within float tolerance of the CPU, not bitwise equal, exactly as
// CUDA's fused cells are.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/zeros_like.h>
#include <torch/library.h>

#include <tuple>

namespace openreg {
namespace {

at::Tensor gates(const at::Tensor& input, const at::Tensor& hidden,
                 const std::optional<at::Tensor>& inputBias,
                 const std::optional<at::Tensor>& hiddenBias) {
  at::Tensor sum = input + hidden;
  if (inputBias && inputBias->defined()) sum = sum + *inputBias;
  if (hiddenBias && hiddenBias->defined()) sum = sum + *hiddenBias;
  return sum;
}

at::Tensor orZeros(const std::optional<at::Tensor>& grad, const at::Tensor& like) {
  return grad && grad->defined() ? *grad : at::zeros_like(like);
}

// [marker: fused-lstm-cell]
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& inputGates, const at::Tensor& hiddenGates, const at::Tensor& cx,
    const std::optional<at::Tensor>& inputBias, const std::optional<at::Tensor>& hiddenBias) {
  const auto chunks = gates(inputGates, hiddenGates, inputBias, hiddenBias).chunk(4, 1);
  const at::Tensor in = chunks[0].sigmoid();
  const at::Tensor forget = chunks[1].sigmoid();
  const at::Tensor cell = chunks[2].tanh();
  const at::Tensor out = chunks[3].sigmoid();
  at::Tensor cy = forget * cx + in * cell;
  at::Tensor hy = out * cy.tanh();
  return {hy, cy, at::cat({in, forget, cell, out}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& gradHy, const std::optional<at::Tensor>& gradCy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool hasBias) {
  const auto w = workspace.chunk(4, 1);
  const at::Tensor &in = w[0], &forget = w[1], &cell = w[2], &out = w[3];
  const at::Tensor gho = orZeros(gradHy, cy);
  const at::Tensor tanhCy = cy.tanh();
  const at::Tensor gcx = orZeros(gradCy, cy) + gho * out * (1 - tanhCy * tanhCy);
  const at::Tensor gradGates =
      at::cat({gcx * cell * in * (1 - in), gcx * cx * forget * (1 - forget),
               gcx * in * (1 - cell * cell), gho * tanhCy * out * (1 - out)},
              1);
  return {gradGates, gcx * forget, hasBias ? gradGates.sum(0) : at::Tensor()};
}

// [marker: fused-gru-cell]
std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& inputGates,
                                           const at::Tensor& hiddenGates, const at::Tensor& hx,
                                           const std::optional<at::Tensor>& inputBias,
                                           const std::optional<at::Tensor>& hiddenBias) {
  auto withBias = [](const at::Tensor& g, const std::optional<at::Tensor>& bias) {
    return bias && bias->defined() ? g + *bias : g;
  };
  const auto i = withBias(inputGates, inputBias).chunk(3, 1);
  const auto h = withBias(hiddenGates, hiddenBias).chunk(3, 1);
  const at::Tensor reset = (i[0] + h[0]).sigmoid();
  const at::Tensor input = (i[1] + h[1]).sigmoid();
  const at::Tensor fresh = (i[2] + reset * h[2]).tanh();
  at::Tensor hy = fresh + input * (hx - fresh);
  return {hy, at::cat({reset, input, fresh, hx, h[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& gradHy, const at::Tensor& workspace, bool hasBias) {
  const auto w = workspace.chunk(5, 1);
  const at::Tensor &reset = w[0], &input = w[1], &fresh = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor gradInput = gradHy * (hx - fresh) * (1 - input) * input;
  const at::Tensor gradFresh = gradHy * (1 - input) * (1 - fresh * fresh);
  const at::Tensor gradReset = gradFresh * hn * (1 - reset) * reset;
  at::Tensor gradInputGates = at::cat({gradReset, gradInput, gradFresh}, 1);
  at::Tensor gradHiddenGates = at::cat({gradReset, gradInput, gradFresh * reset}, 1);
  return {gradInputGates, gradHiddenGates, gradHy * input,
          hasBias ? gradInputGates.sum(0) : at::Tensor(),
          hasBias ? gradHiddenGates.sum(0) : at::Tensor()};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(lstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(lstmCellBackward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(gruCell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(gruCellBackward));
}

}  // namespace openreg
