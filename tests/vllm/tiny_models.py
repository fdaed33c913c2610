"""The models of the vLLM suite (`make test-vllm`, bench/vllm_bench.py): a small Llama (grouped-query
attention) and a small GPT-2, built from configs with seeded random weights and saved to a folder
with a byte-level BPE tokenizer trained here by `tokenizers` on this repository's docs. Nothing is
downloaded: vLLM and Hugging Face both load the same folder.

Why the weights are scaled up (`initializer_range`): greedy decoding compares argmaxes, and with
transformers' default initialization a two-layer model's logits are nearly flat, so the top two
tokens can differ by less than float32 rounding between two correct attention implementations.
Larger weights give the argmax a margin; the test then checks equality, not luck.
"""

from __future__ import annotations

import pathlib

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

ROOT = pathlib.Path(__file__).resolve().parents[2]
VOCAB_SIZE = 512
MAX_POSITIONS = 256
SEED = 0

# A chat template of our own (no hub): vLLM's /v1/chat/completions renders messages through it.
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}"
)

# Prompts of different lengths (1 to 85 tokens with the trained tokenizer), for batches whose
# sequences are in prefill and in decode at the same time.
PROMPTS = [
    "The stream",
    "Device memory is a memfd mapped read-write once",
    "A failed task poisons the memory it writes",
    (
        "Workers shared per device, not a thread per stream. A stream is a queue handed to its device's "
        "executor when it has work."
    ),
    "Graphs",
    (
        "The allocator caches blocks of device memory and splits them; freed blocks return to the pool "
        "of their stream, and a block used on another stream waits for that stream's events before it "
        "can be handed out again."
    ),
    "Random numbers by state transfer",
    "Copies run ATen's own copy on kernel-window aliases, so results are bitwise the CPU's",
    "openreg",
    "Every operator is asynchronous and bitwise equal to the CPU without per-operator code",
]


def train_tokenizer() -> transformers.PreTrainedTokenizerFast:
    """A byte-level BPE of VOCAB_SIZE tokens trained on docs/*.md, wrapped for transformers."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))]
    tokenizer.train_from_iterator(texts, trainer=trainer)
    wrapped = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<|endoftext|>", eos_token="<|endoftext|>", unk_token="<|endoftext|>"
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def _config(kind: str, tokenizer: transformers.PreTrainedTokenizerFast) -> transformers.PretrainedConfig:
    special = {"bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}
    if kind == "llama":
        return transformers.LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=128,
            intermediate_size=256,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,  # grouped-query attention: two query heads per key/value head
            max_position_embeddings=MAX_POSITIONS,
            initializer_range=0.2,
            tie_word_embeddings=False,
            **special,
        )
    if kind == "gpt2":
        return transformers.GPT2Config(
            vocab_size=len(tokenizer),
            n_embd=128,
            n_layer=2,
            n_head=4,
            n_positions=MAX_POSITIONS,
            initializer_range=0.2,
            **special,
        )
    raise ValueError(f"unknown model kind {kind!r}: 'llama' or 'gpt2'")


def build(kind: str, folder: pathlib.Path) -> pathlib.Path:
    """Writes model `kind` ('llama' or 'gpt2') with seeded weights and the tokenizer to `folder`."""
    folder = pathlib.Path(folder)
    if (folder / "config.json").exists():
        return folder
    tokenizer = train_tokenizer()
    torch.manual_seed(SEED)
    config = _config(kind, tokenizer)
    config.dtype = torch.float32
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    transformers.GenerationConfig(
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, do_sample=False
    ).save_pretrained(folder)
    return folder


def hf_model(folder: pathlib.Path) -> tuple:
    """The tokenizer and the model of `folder` on the CPU in float32, with no end-of-text stop:
    greedy decoding makes exactly the new tokens asked for, as vLLM does with `ignore_eos`.
    (transformers reads eos_token_id=None given to generate as "unset" and falls back to the
    model's own generation config, so the model's is cleared.)"""
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    return tokenizer, model


def hf_generate(tokenizer, model, ids: list[int], max_new_tokens: int) -> list[int]:
    """Greedy `generate` of one prompt (no padding): its new token ids."""
    config = transformers.GenerationConfig(
        max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=tokenizer.eos_token_id
    )
    prompt = torch.tensor([ids])
    with torch.inference_mode():
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), generation_config=config)
    return generated[0, prompt.shape[1] :].tolist()


def hf_greedy(folder: pathlib.Path, prompts: list[str] | list[list[int]], max_new_tokens: int) -> list[list[int]]:
    """The oracle: Hugging Face's greedy `generate` on the CPU for each prompt (text, or token ids),
    one at a time."""
    tokenizer, model = hf_model(folder)
    return [
        hf_generate(tokenizer, model, tokenizer(p).input_ids if isinstance(p, str) else list(p), max_new_tokens)
        for p in prompts
    ]


def device_state(model) -> dict:
    """What a vLLM worker sees of its device (offline_run.py sends it with LLM.apply_model; defined
    in a module, not the script, so that every vLLM process unpickles it by name)."""
    return {
        "device": str(next(model.parameters()).device),
        "parameter_devices": sorted({p.device.type for p in model.parameters()}),
        "memory_allocated": torch.openreg.memory_allocated(),
        "total_memory": torch.openreg.mem_get_info()[1],
    }
