"""The models behind the training-step cases of engine_bench.py.

Each case builds, for one device, a model, one fixed batch and an optimizer from the same seed,
and returns a step function: zero_grad, forward, loss, backward, optimizer step. The step returns
the loss tensor without reading it, so the host never waits for the device inside a timed loop.
Built for "cpu" and for "openreg" from the same seed, the two start from identical parameters and
data, so engine_bench.py can also check that their losses stay bitwise equal.

Dropout is off everywhere: on an accelerator `F.dropout` takes `native_dropout`, which the CPU
does not use (docs/operators.md), so its random masks would differ from the CPU's by design.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

Step = Callable[[], torch.Tensor]


@dataclass(frozen=True)
class TrainingCase:
    name: str
    build: Callable[[str], Step]


def _stepper(model: nn.Module, optimizer: torch.optim.Optimizer, loss_of: Callable[[], torch.Tensor]) -> Step:
    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = loss_of()
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def mlp(device: str) -> Step:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
    model = model.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 256).to(device)
    y = torch.randint(0, 10, (128,)).to(device)
    return _stepper(model, optimizer, lambda: F.cross_entropy(model(x), y))


def cnn(device: str) -> Step:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(64 * 8 * 8, 128), nn.ReLU(), nn.Linear(128, 10),
    ).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(32, 3, 32, 32).to(device)
    y = torch.randint(0, 10, (32,)).to(device)
    return _stepper(model, optimizer, lambda: F.cross_entropy(model(x), y))


class TransformerLM(nn.Module):
    """Token and position embeddings, nn.TransformerEncoder with a causal mask, a vocabulary head."""

    def __init__(self, vocab: int, seq: int, d_model: int, heads: int, layers: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.position = nn.Parameter(0.02 * torch.randn(seq, d_model))
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seq = tokens.shape[1]
        mask = nn.Transformer.generate_square_subsequent_mask(seq, device=tokens.device)
        hidden = self.encoder(self.embed(tokens) + self.position[:seq], mask=mask, is_causal=True)
        return self.head(hidden)


def transformer_lm(device: str) -> Step:
    vocab, seq, batch = 1000, 64, 16
    torch.manual_seed(0)
    model = TransformerLM(vocab, seq, d_model=128, heads=4, layers=2).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    text = torch.randint(0, vocab, (batch, seq + 1))
    inputs, targets = text[:, :-1].to(device), text[:, 1:].to(device)
    return _stepper(model, optimizer, lambda: F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten()))


class LSTMClassifier(nn.Module):
    def __init__(self, features: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, layers, batch_first=True)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1])


class UnrolledLSTMClassifier(nn.Module):
    """The same network with its cells written out as ATen operators, one time step at a time.

    ATen's own LSTM cell takes a fused kernel on every device but the CPU, so this variant is the
    one that runs the same operators, in the same order, on both.
    """

    def __init__(self, features: int, hidden: int, layers: int, classes: int) -> None:
        super().__init__()
        self.cells = nn.ModuleList(
            nn.ModuleDict({"ih": nn.Linear(features if i == 0 else hidden, 4 * hidden),
                           "hh": nn.Linear(hidden, 4 * hidden)})
            for i in range(layers)
        )
        self.hidden = hidden
        self.head = nn.Linear(hidden, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        sequence = list(x.unbind(1))
        for cell in self.cells:
            h = x.new_zeros(x.shape[0], self.hidden)
            c = x.new_zeros(x.shape[0], self.hidden)
            outputs = []
            for step_input in sequence:
                i, f, g, o = (cell["ih"](step_input) + cell["hh"](h)).chunk(4, 1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
                h = torch.sigmoid(o) * torch.tanh(c)
                outputs.append(h)
            sequence = outputs
        return self.head(sequence[-1])


def _lstm_case(network: type[nn.Module]) -> Callable[[str], Step]:
    def build(device: str) -> Step:
        torch.manual_seed(0)
        model = network(64, 128, 2, 10).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        x = torch.randn(32, 32, 64).to(device)  # batch 32, 32 time steps
        y = torch.randint(0, 10, (32,)).to(device)
        return _stepper(model, optimizer, lambda: F.cross_entropy(model(x), y))

    return build


TRAINING_CASES = [
    TrainingCase("MLP step (256-512-512-10, batch 128, SGD)", mlp),
    TrainingCase("CNN step (2 conv+bn, 32x32, batch 32, SGD)", cnn),
    TrainingCase("transformer LM step (2x128, seq 64, AdamW)", transformer_lm),
    TrainingCase("nn.LSTM step (2x128, seq 32, batch 32, Adam)", _lstm_case(LSTMClassifier)),
    TrainingCase("LSTM step, cells unrolled (same sizes)", _lstm_case(UnrolledLSTMClassifier)),
]


# Training steps of real `transformers` models (GPT-2, BERT, Llama), built from configs: see
# hf_models.py. Without `transformers` installed they are listed and skipped with that reason.
from hf_models import CASES as _HF_CASES  # noqa: E402

TRAINING_CASES += [TrainingCase(name, build) for name, build in _HF_CASES]
