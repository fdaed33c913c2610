"""Training steps of real `transformers` models, for engine_bench.py (through models.py).

Each model is built from a config (nothing is downloaded: the weights are the seeded random
initialization), small enough for a 2-core machine but with the parts that make the model what it
is: GPT-2 (learned positions, fused QKV `Conv1D`, GELU, tied embeddings), BERT for masked-language
modelling (padding mask, token types, only masked positions in the loss) and Llama (RMSNorm,
rotary positions, SwiGLU, grouped-query attention with fewer key/value heads than query heads).
Every model computes its own loss from `labels`, as in a training script, and trains with AdamW.

Dropout is off in every config (see models.py: `F.dropout` on an accelerator takes
`native_dropout`, so its masks would differ from the CPU's by design). Attention is PyTorch's
`scaled_dot_product_attention` (`attn_implementation="sdpa"`, the library's default), which openreg
answers with the CPU's own kernel choice (docs/operators.md, `_fused_sdp_choice_stub`).

`transformers` is not in the project's test environment: `make bench` installs it from
requirements-bench.txt with torch pinned by constraints.txt. Without it every case here
raises a ModuleNotFoundError that says so, and engine_bench.py prints it as the reason the case
was skipped.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import torch

# Models come from configs only; a hub lookup would be a bug, and there is no network to answer it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

Step = Callable[[], torch.Tensor]

VOCAB = 8192
BATCH = 8
SEQ = 128


def _transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError as error:
        raise ModuleNotFoundError(
            "transformers is not installed (make bench installs it from requirements-bench.txt "
            "with torch pinned by constraints.txt)") from error
    transformers.logging.set_verbosity_error()  # no advice on the console in the middle of a table
    return transformers


def _stepper(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> Step:
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)

    def step() -> torch.Tensor:
        optimizer.zero_grad()
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        return loss.detach()

    return step


def _to(device: str, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {name: tensor.to(device) for name, tensor in batch.items()}


def gpt2(device: str) -> Step:
    tf = _transformers()
    config = tf.GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=256, n_layer=2, n_head=4,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(config)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    return _stepper(model.to(device), _to(device, {"input_ids": tokens, "labels": tokens}))


def bert_mlm(device: str) -> Step:
    tf = _transformers()
    config = tf.BertConfig(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=1024, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
                           attention_probs_dropout_prob=0.0, attn_implementation="sdpa")
    torch.manual_seed(0)
    model = tf.BertForMaskedLM(config)
    tokens = torch.randint(5, VOCAB, (BATCH, SEQ))
    # Two segments per sequence, and the second half of the batch padded to varying lengths, so the
    # attention mask is a real padding mask rather than all ones.
    token_types = (torch.arange(SEQ) >= SEQ // 2).long().expand(BATCH, SEQ).contiguous()
    lengths = torch.tensor([SEQ] * (BATCH // 2) + [SEQ - 16 * (i + 1) for i in range(BATCH - BATCH // 2)])
    attention_mask = (torch.arange(SEQ) < lengths[:, None]).long()
    masked = (torch.rand(BATCH, SEQ) < 0.15) & attention_mask.bool()
    labels = torch.where(masked, tokens, torch.full_like(tokens, -100))
    inputs = torch.where(masked, torch.full_like(tokens, 4), tokens)  # 4 stands for [MASK]
    batch = {"input_ids": inputs, "token_type_ids": token_types, "attention_mask": attention_mask, "labels": labels}
    return _stepper(model.to(device), _to(device, batch))


def llama_config(tf: Any, **overrides: Any) -> Any:
    """A small Llama with grouped-query attention: 8 query heads share 2 key/value heads."""
    settings: dict[str, Any] = {
        "vocab_size": VOCAB, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 2,
        "num_attention_heads": 8, "num_key_value_heads": 2, "max_position_embeddings": 512,
        "attention_dropout": 0.0, "attn_implementation": "sdpa",
    }
    settings.update(overrides)
    return tf.LlamaConfig(**settings)


def llama(device: str) -> Step:
    tf = _transformers()
    config = llama_config(tf)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    return _stepper(model.to(device), _to(device, {"input_ids": tokens, "labels": tokens}))


# (name, build) pairs; models.py turns them into TrainingCases.
CASES: list[tuple[str, Callable[[str], Step]]] = [
    ("HF GPT-2 LM step (2x256, seq 128, b8, AdamW)", gpt2),
    ("HF BERT MLM step (2x256, seq 128, b8, AdamW)", bert_mlm),
    ("HF Llama GQA 8q/2kv step (2x256, seq 128, b8)", llama),
]
