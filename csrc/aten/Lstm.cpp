// nn.LSTM on openreg through oneDNN's LSTM layer, as the CPU runs it.
//
// Note [LSTM layers]
// On the CPU, aten::lstm runs each layer and direction as one oneDNN RNN primitive
// (mkldnn_rnn_layer, whose backward is mkldnn_rnn_layer_backward). ATen's own dispatch takes that
// route only for CPU tensors; on every other device it composes each time step from matmuls and
// the fused cells (Note [Fused recurrent cells]), some twenty launches per step, several times the
// CPU's time (docs/operators.md has the figures). This kernel, at AutogradPrivateUse1 for
// aten::lstm.input, takes the CPU's route for openreg tensors: the same mkldnn_rnn_layer calls in
// the same order, each one task on the engine, so results are bitwise the CPU's and autograd
// records mkldnn_rnn_layer's own derivative. The conditions are the CPU's: oneDNN enabled, float32,
// no projections, a non-empty input. Anything else takes ATen's composite implementation, as
// before.
#include <ATen/Context.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/dropout.h>
#include <ATen/ops/lstm_native.h>
#include <ATen/ops/mkldnn_rnn_layer.h>
#include <ATen/ops/stack.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>

#include <tuple>
#include <vector>

namespace openreg {
namespace {

constexpr int64_t kLstmMode = 2;  // oneDNN's rnn_kind::LSTM, as the CPU passes it

bool takesOneDnn(const at::Tensor& input, at::TensorList hx, at::TensorList params, bool hasBiases,
                 int64_t numLayers, bool bidirectional) {
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t perLayer = hasBiases ? 4 : 2;  // a projection weight would make it 3 or 5
  return at::globalContext().userEnabledMkldnn() && input.scalar_type() == at::kFloat &&
         input.numel() != 0 && hx.size() == 2 &&
         static_cast<int64_t>(params.size()) == numLayers * directions * perLayer;
}

// [marker: lstm-onednn]
std::tuple<at::Tensor, at::Tensor, at::Tensor> lstm(const at::Tensor& input, at::TensorList hx,
                                                    at::TensorList params, bool hasBiases,
                                                    int64_t numLayers, double dropout, bool train,
                                                    bool bidirectional, bool batchFirst) {
  if (!takesOneDnn(input, hx, params, hasBiases, numLayers, bidirectional)) {
    return at::native::lstm(input, hx, params, hasBiases, numLayers, dropout, train, bidirectional,
                            batchFirst);
  }
  const int64_t directions = bidirectional ? 2 : 1;
  const int64_t perLayer = hasBiases ? 4 : 2;
  const at::Tensor h0 = hx[0].contiguous();
  const at::Tensor c0 = hx[1].contiguous();
  const int64_t hiddenSize = h0.size(2);
  at::Tensor layerInput = (batchFirst ? input.transpose(0, 1) : input).contiguous();
  std::vector<at::Tensor> hy(numLayers * directions);
  std::vector<at::Tensor> cy(numLayers * directions);
  for (int64_t layer = 0; layer < numLayers; ++layer) {
    std::vector<at::Tensor> outputs(directions);
    for (int64_t direction = 0; direction < directions; ++direction) {
      const int64_t index = layer * directions + direction;
      const at::Tensor& wIh = params[index * perLayer];
      const at::Tensor& wHh = params[index * perLayer + 1];
      const at::Tensor bIh =
          hasBiases ? params[index * perLayer + 2] : at::zeros(wIh.sizes(), wIh.options());
      const at::Tensor bHh =
          hasBiases ? params[index * perLayer + 3] : at::zeros(wHh.sizes(), wHh.options());
      auto [output, h, c, workspace] = at::mkldnn_rnn_layer(
          layerInput, wIh, wHh, bIh, bHh, h0[index], c0[index], /*reverse=*/direction > 0,
          /*batch_sizes=*/{}, kLstmMode, hiddenSize, numLayers, hasBiases, bidirectional,
          batchFirst, train);
      outputs[direction] = output;
      hy[index] = h;
      cy[index] = c;
    }
    layerInput = directions == 1 ? outputs[0] : at::cat(outputs, -1);
    if (dropout != 0 && train && layer < numLayers - 1) {
      layerInput = at::dropout(layerInput, dropout, /*train=*/true);
    }
  }
  at::Tensor output = batchFirst ? layerInput.transpose(0, 1) : layerInput;
  return {output, at::stack(hy, 0), at::stack(cy, 0)};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, AutogradPrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm));
}

// Under torch.inference_mode() the dispatcher skips the autograd keys, and the call would reach
// ATen's composite implementation at the backend key instead: the same kernel there keeps
// inference on the CPU's route (bitwise its results).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("lstm.input", TORCH_FN(lstm));
}

}  // namespace openreg
