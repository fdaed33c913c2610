// The fused recurrent cells ATen calls on accelerators.
//
// Note [Fused recurrent cells]
// ATen's LSTM and GRU cells compute gates with matmuls and then, on CUDA, XPU and PrivateUse1
// (hard-coded in aten/src/ATen/native/RNN.cpp), call one fused elementwise operator per step:
// _thnn_fused_lstm_cell and _thnn_fused_gru_cell, with backward operators of their own. ATen has
// kernels for them only on CUDA, so without these nn.LSTM, nn.LSTMCell, nn.GRU and nn.GRUCell do
// not run on openreg. Each kernel here is one stream task: it checks shapes and dtypes on the host,
// allocates its outputs on the device, and the task composes the elementwise math from ATen's CPU
// operators on kernel-window aliases, then writes the results into the outputs. (Composed from
// ATen operators on openreg tensors instead, a cell step costs some twenty launches.) A float32
// nn.LSTM now takes the CPU's oneDNN layers instead, Note [LSTM layers] in Lstm.cpp; the cells
// serve nn.LSTMCell, nn.GRU, nn.GRUCell and other dtypes. The workspace layouts are CUDA's:
// activated gates for the LSTM; reset, input and new gates, the previous hidden state and the
// hidden new-gate part for the GRU. The CPU itself runs the unfused cell (biases added inside the
// matmuls), which rounds differently: results are within float tolerance of the CPU, not bitwise
// equal, exactly as CUDA's fused cells are.
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros_like.h>
#include <openreg/runtime.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

#include "aten/KernelAlias.h"
#include "aten/NativeKernel.h"
#include "aten/Registration.h"
#include "core/Functions.h"

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

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellMath(
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

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackwardMath(
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

std::tuple<at::Tensor, at::Tensor> gruCellMath(const at::Tensor& inputGates,
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

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackwardMath(
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

// --- One task per cell ---

using Tensors = std::vector<at::Tensor>;

at::Tensor optionalTensor(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? *t : at::Tensor();
}

std::optional<at::Tensor> asOptional(const at::Tensor& t) {
  return t.defined() ? std::optional<at::Tensor>(t) : std::nullopt;
}

// Checks one argument of a cell: on `device`, of `dtype`, of the expected shape.
void checkArgument(const char* op, const char* name, const at::Tensor& t, const at::Tensor& like,
                   c10::IntArrayRef sizes) {
  if (!t.defined()) return;
  TORCH_CHECK(t.device() == like.device(), OR_DEVICE_NAME ": ", op, ": ", name, " is on ",
              t.device(), ", expected ", like.device(), " like the input gates");
  TORCH_CHECK(t.scalar_type() == like.scalar_type(), OR_DEVICE_NAME ": ", op, ": ", name, " is ",
              t.scalar_type(), ", expected ", like.scalar_type(), " like the input gates");
  TORCH_CHECK(t.sizes() == sizes, OR_DEVICE_NAME ": ", op, ": ", name, " has shape ", t.sizes(),
              ", expected ", sizes);
}

// The inputs of a cell: gates of `gates` chunks from the input and the hidden state, the previous
// state `state` (cx or hx), and the optional biases, all on one device, of one dtype.
void checkCellInputs(const char* op, int64_t gates, const at::Tensor& inputGates,
                     const at::Tensor& hiddenGates, const char* stateName, const at::Tensor& state,
                     const std::optional<at::Tensor>& inputBias,
                     const std::optional<at::Tensor>& hiddenBias) {
  TORCH_CHECK(state.dim() == 2, OR_DEVICE_NAME ": ", op, ": ", stateName,
              " must be 2-D, got shape ", state.sizes());
  const int64_t batch = state.size(0), hidden = state.size(1);
  checkArgument(op, "input_gates", inputGates, inputGates, {batch, gates * hidden});
  checkArgument(op, "hidden_gates", hiddenGates, inputGates, {batch, gates * hidden});
  checkArgument(op, stateName, state, inputGates, {batch, hidden});
  checkArgument(op, "input_bias", optionalTensor(inputBias), inputGates, {gates * hidden});
  checkArgument(op, "hidden_bias", optionalTensor(hiddenBias), inputGates, {gates * hidden});
}

Tensors aliases(const Tensors& ts) {
  Tensors out;
  for (const at::Tensor& t : ts) out.push_back(kernelAlias(t));
  return out;
}

// Queues `math` on the current stream of `like`'s device as one task: it runs on kernel aliases of
// `inputs` and its results (one per output, undefined where the output is) are written into
// `outputs`.
template <class Math>
void launchCell(const char* op, const at::Tensor& like, const Tensors& inputs,
                const Tensors& outputs, Math math) {
  launchOnCurrentStream(like.device(), op, inputs, outputs,
                        [in = aliases(inputs), out = aliases(outputs), math]() mutable {
                          const Tensors results = math(in);
                          for (size_t i = 0; i < out.size(); ++i) {
                            if (out[i].defined()) out[i].copy_(results[i]);
                          }
                        });
}

at::Tensor emptyOf(const at::Tensor& like, c10::IntArrayRef sizes) {
  return at::empty(sizes, like.options());
}

// [marker: fused-lstm-cell]
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCell(
    const at::Tensor& inputGates, const at::Tensor& hiddenGates, const at::Tensor& cx,
    const std::optional<at::Tensor>& inputBias, const std::optional<at::Tensor>& hiddenBias) {
  checkCellInputs("_thnn_fused_lstm_cell", 4, inputGates, hiddenGates, "cx", cx, inputBias,
                  hiddenBias);
  const int64_t batch = cx.size(0), hidden = cx.size(1);
  DeviceScope scope(inputGates.device().index());
  at::Tensor hy = emptyOf(cx, {batch, hidden});
  at::Tensor cy = emptyOf(cx, {batch, hidden});
  at::Tensor workspace = emptyOf(cx, {batch, 4 * hidden});
  launchCell("aten::_thnn_fused_lstm_cell", inputGates,
             {inputGates, hiddenGates, cx, optionalTensor(inputBias), optionalTensor(hiddenBias)},
             {hy, cy, workspace}, [](const Tensors& in) -> Tensors {
               auto [h, c, w] =
                   lstmCellMath(in[0], in[1], in[2], asOptional(in[3]), asOptional(in[4]));
               return {h, c, w};
             });
  return {hy, cy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> lstmCellBackward(
    const std::optional<at::Tensor>& gradHy, const std::optional<at::Tensor>& gradCy,
    const at::Tensor& cx, const at::Tensor& cy, const at::Tensor& workspace, bool hasBias) {
  constexpr const char* op = "_thnn_fused_lstm_cell_backward_impl";
  TORCH_CHECK(cx.dim() == 2, OR_DEVICE_NAME ": ", op, ": cx must be 2-D, got shape ", cx.sizes());
  const int64_t batch = cx.size(0), hidden = cx.size(1);
  checkArgument(op, "workspace", workspace, workspace, {batch, 4 * hidden});
  for (const auto& [name, t] :
       {std::pair{"grad_hy", optionalTensor(gradHy)}, std::pair{"grad_cy", optionalTensor(gradCy)},
        std::pair{"cx", cx}, std::pair{"cy", cy}}) {
    checkArgument(op, name, t, workspace, {batch, hidden});
  }
  if (!optionalTensor(gradHy).defined() && !optionalTensor(gradCy).defined()) {
    return {at::Tensor(), at::Tensor(), at::Tensor()};  // as CUDA: no gradient flows
  }
  DeviceScope scope(cx.device().index());
  at::Tensor gradGates = emptyOf(cx, {batch, 4 * hidden});
  at::Tensor gradCx = emptyOf(cx, {batch, hidden});
  at::Tensor gradBias = hasBias ? emptyOf(cx, {4 * hidden}) : at::Tensor();
  launchCell("aten::_thnn_fused_lstm_cell_backward_impl", cx,
             {optionalTensor(gradHy), optionalTensor(gradCy), cx, cy, workspace},
             {gradGates, gradCx, gradBias}, [hasBias](const Tensors& in) -> Tensors {
               auto [gates, gcx, bias] = lstmCellBackwardMath(asOptional(in[0]), asOptional(in[1]),
                                                              in[2], in[3], in[4], hasBias);
               return {gates, gcx, bias};
             });
  return {gradGates, gradCx, gradBias};
}

// [marker: fused-gru-cell]
std::tuple<at::Tensor, at::Tensor> gruCell(const at::Tensor& inputGates,
                                           const at::Tensor& hiddenGates, const at::Tensor& hx,
                                           const std::optional<at::Tensor>& inputBias,
                                           const std::optional<at::Tensor>& hiddenBias) {
  checkCellInputs("_thnn_fused_gru_cell", 3, inputGates, hiddenGates, "hx", hx, inputBias,
                  hiddenBias);
  const int64_t batch = hx.size(0), hidden = hx.size(1);
  DeviceScope scope(inputGates.device().index());
  at::Tensor hy = emptyOf(hx, {batch, hidden});
  at::Tensor workspace = emptyOf(hx, {batch, 5 * hidden});
  launchCell("aten::_thnn_fused_gru_cell", inputGates,
             {inputGates, hiddenGates, hx, optionalTensor(inputBias), optionalTensor(hiddenBias)},
             {hy, workspace}, [](const Tensors& in) -> Tensors {
               auto [h, w] = gruCellMath(in[0], in[1], in[2], asOptional(in[3]), asOptional(in[4]));
               return {h, w};
             });
  return {hy, workspace};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> gruCellBackward(
    const at::Tensor& gradHy, const at::Tensor& workspace, bool hasBias) {
  constexpr const char* op = "_thnn_fused_gru_cell_backward";
  TORCH_CHECK(gradHy.dim() == 2, OR_DEVICE_NAME ": ", op, ": grad_hy must be 2-D, got shape ",
              gradHy.sizes());
  const int64_t batch = gradHy.size(0), hidden = gradHy.size(1);
  checkArgument(op, "workspace", workspace, gradHy, {batch, 5 * hidden});
  DeviceScope scope(gradHy.device().index());
  at::Tensor gradInputGates = emptyOf(gradHy, {batch, 3 * hidden});
  at::Tensor gradHiddenGates = emptyOf(gradHy, {batch, 3 * hidden});
  at::Tensor gradHx = emptyOf(gradHy, {batch, hidden});
  at::Tensor gradInputBias = hasBias ? emptyOf(gradHy, {3 * hidden}) : at::Tensor();
  at::Tensor gradHiddenBias = hasBias ? emptyOf(gradHy, {3 * hidden}) : at::Tensor();
  launchCell("aten::_thnn_fused_gru_cell_backward", gradHy, {gradHy, workspace},
             {gradInputGates, gradHiddenGates, gradHx, gradInputBias, gradHiddenBias},
             [hasBias](const Tensors& in) -> Tensors {
               auto [gi, gh, ghx, gib, ghb] = gruCellBackwardMath(in[0], in[1], hasBias);
               return {gi, gh, ghx, gib, ghb};
             });
  return {gradInputGates, gradHiddenGates, gradHx, gradInputBias, gradHiddenBias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_thnn_fused_lstm_cell", OPENREG_NATIVE(lstmCell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", OPENREG_NATIVE(lstmCellBackward));
  m.impl("_thnn_fused_gru_cell", OPENREG_NATIVE(gruCell));
  m.impl("_thnn_fused_gru_cell_backward", OPENREG_NATIVE(gruCellBackward));
}

}  // namespace openreg
