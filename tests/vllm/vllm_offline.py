"""Offline inference with vLLM on openreg (`make test-vllm`, docs/vllm.md), against Hugging Face's
greedy `generate` on the CPU for the same weights: every generated token id equal, for a small
Llama (grouped-query attention) and a small GPT-2, in batches that mix prefill and decode, with
chunked prefill, with prefix caching and with torch.compile; the KV cache sized from the device's memory; vLLM's own
error for a prompt longer than the model allows.

Each vLLM run is a fresh interpreter (tests/vllm/offline_run.py): the device's capacity
(OPENREG_DEVICE_MEMORY) and vLLM's engine are fixed per process.
"""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny_models

HERE = pathlib.Path(__file__).resolve().parent
MAX_TOKENS = 32


def run_offline(model: pathlib.Path, out: pathlib.Path, *args: str, env: dict | None = None) -> dict:
    """tests/vllm/offline_run.py in a fresh interpreter; its JSON result."""
    result = subprocess.run(
        [sys.executable, str(HERE / "offline_run.py"), str(model), str(out), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, f"offline_run.py {args} failed:\n{result.stdout[-3000:]}\n{result.stderr[-8000:]}"
    return json.loads(out.read_text())


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def model(request, tmp_path_factory) -> tuple[pathlib.Path, list[list[int]]]:
    """A model folder, and Hugging Face's greedy tokens on the CPU for every prompt."""
    folder = tiny_models.build(request.param, tmp_path_factory.mktemp("vllm") / request.param)
    return folder, tiny_models.hf_greedy(folder, tiny_models.PROMPTS, MAX_TOKENS)


def _first_divergence(got: list[list[int]], want: list[list[int]]) -> str:
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        for step, (a, b) in enumerate(zip(g, w, strict=False)):
            if a != b:
                return f"prompt {index} ({tiny_models.PROMPTS[index]!r}), token {step}: vLLM {a}, HF {b}"
    return "none"


def test_one_batch_of_every_prompt_equals_hf_greedy_on_cpu(model, tmp_path):
    """All ten prompts (1 to 85 tokens) in one batch: the first step prefills them together,
    the next ones decode them together. vLLM's defaults: the engine core runs in a process forked
    from the program's, which vLLM's configuration questions left without an initialized openreg
    (the engine core failed to start with "Cannot re-initialize OpenReg in forked subprocess" when
    the platform read the device's memory through mem_get_info)."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", "--max-tokens", str(MAX_TOKENS))
    assert result["platform"] == "OpenRegPlatform"
    assert result["compilation_mode"] == "NONE"
    assert result["device"]["parameter_devices"] == ["openreg"]
    assert (result["engine_in_process"], result["multiproc_method"]) == (False, "fork")
    assert result["initialized_here"] is False
    assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)


def test_engine_in_the_programs_process_equals_hf(model, tmp_path):
    """VLLM_ENABLE_V1_MULTIPROCESSING=0: the engine core and its worker in the program's process."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", "--max-tokens", str(MAX_TOKENS), "--in-process")
    assert (result["engine_in_process"], result["initialized_here"]) == (True, True)
    assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)


def test_a_program_that_used_openreg_first_gets_spawned_processes(tmp_path):
    """A tensor on openreg before LLM(): a forked engine core could not use the device, so the
    platform switches vLLM to spawn, as vLLM does when CUDA is initialized, and says so once."""
    folder = tiny_models.build("llama", tmp_path / "llama")
    expected = tiny_models.hf_greedy(folder, tiny_models.PROMPTS, 8)
    result = subprocess.run(
        [sys.executable, str(HERE / "offline_run.py"), str(folder), str(tmp_path / "out.json"),
         "--max-tokens", "8", "--use-device-first"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-8000:]
    out = json.loads((tmp_path / "out.json").read_text())
    assert (out["multiproc_method"], out["initialized_here"]) == ("spawn", True)
    assert result.stderr.count("overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn'") == 1, result.stderr[-4000:]
    assert out["tokens"] == expected, _first_divergence(out["tokens"], expected)


@pytest.mark.parametrize("option", ["--tensor-parallel-size", "--pipeline-parallel-size"])
def test_parallelism_over_two_devices_equals_hf(model, option, tmp_path):
    """Two ranks, on openreg:0 and openreg:1, a worker each forked by vLLM's engine core. Tensor
    parallelism: each holds half of every attention and MLP layer's heads and columns, their partial
    results meeting in occl's collectives (all-reduce after each row-parallel layer, the logits
    gathered). Pipeline parallelism: each holds one of the two layers, the first sending its
    hidden states to the second. The same tokens as HF on the CPU."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", "--max-tokens", str(MAX_TOKENS), option, "2")
    assert result["worker_devices"] == ["openreg:0", "openreg:1"]
    assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)


# Inductor's fused kernels round differently from eager ones, so a compiled run may pick the other
# of two tokens whose logits are equal to within rounding. Such a divergence is accepted only there:
# HF's logits at that step, on the CPU, must have the two tokens within NEAR_TIE of each other.
NEAR_TIE = 1e-4


def _assert_equal_up_to_near_ties(folder, got: list[list[int]], want: list[list[int]]) -> None:
    tokenizer, hf = tiny_models.hf_model(folder)
    for index, (g, w) in enumerate(zip(got, want, strict=True)):
        step = next((k for k, (a, b) in enumerate(zip(g, w, strict=False)) if a != b), None)
        if step is None:
            assert len(g) == len(w), f"prompt {index}: {len(g)} tokens, HF {len(w)}"
            continue
        ids = tokenizer(tiny_models.PROMPTS[index]).input_ids + w[:step]
        with torch.inference_mode():
            logits = hf(torch.tensor([ids])).logits[0, -1].float()
        gap = (logits[w[step]] - logits[g[step]]).abs().item()
        assert gap <= NEAR_TIE * max(1.0, logits.abs().max().item()), (
            f"{_first_divergence(got, want)}: not a near-tie, HF's logits differ by {gap}"
        )


def test_torch_compile_equals_hf(model, tmp_path):
    """vLLM's torch.compile (VLLM_COMPILE: the model's graph cut at each attention call, the pieces
    compiled by Inductor for openreg): the same tokens as HF, up to the first near-tie (above)."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", "--compile", env={"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert result["compilation_mode"] == "VLLM_COMPILE"
    _assert_equal_up_to_near_ties(folder, result["tokens"], expected)


# Graphs (torch_openreg/vllm/graphs.py, docs/vllm.md "Graphs"): the prompts' prefill runs without a
# whole-model graph (more tokens than the largest capture size), then each of the 31 decode steps
# replays the graph of its batch, padded to a capture size (16 for a batch of 10).
DECODE_REPLAYS = MAX_TOKENS - 1
# New tokens per prompt in the continuous-batching runs.
MIXED_LENGTHS = [8, 32, 12, 20, 5, 32, 16, 9, 24, 13]


@pytest.mark.parametrize(
    "options, cudagraph_mode",
    [
        (("--graphs", "FULL_DECODE_ONLY"), "FULL_DECODE_ONLY"),
        (("--compile", "--graphs", "default"), "FULL_AND_PIECEWISE"),
    ],
    ids=["decode-graphs-around-the-eager-model", "vllms-defaults-compiled"],
)
def test_graphs_replay_every_decode_step_and_equal_hf(model, options, cudagraph_mode, tmp_path):
    """Graphs on torch.accelerator.Graph: around the eager model (compilation mode NONE, graphs of
    the whole model for decode batches), and vLLM's defaults (torch.compile, FULL_AND_PIECEWISE:
    the same decode graphs, and graphs of the compiled pieces for other batches). Every decode step
    is a replay (counted by the wrapper in the engine core's process), and the tokens are HF's (up
    to a near-tie when compiled, as in test_torch_compile_equals_hf)."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", *options, env={"VLLM_DISABLE_COMPILE_CACHE": "1"})
    assert result["cudagraph_mode"] == cudagraph_mode
    full = {batch: n for batch, n in result["graphs"]["replays_by_batch"].items() if batch.startswith("FULL")}
    assert sum(full.values()) == DECODE_REPLAYS and full.get("FULL 16", 0) > 0, result["graphs"]
    assert result["graphs"]["captures"] > 0
    if "--compile" in options:
        _assert_equal_up_to_near_ties(folder, result["tokens"], expected)
    else:
        assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)


def test_graphs_with_continuous_batching_equal_hf(model, tmp_path):
    """Decode graphs while requests come and go (at most 4 sequences, the lengths of
    test_continuous_batching_mixes_prefill_and_decode_and_equals_hf): decode batches of 1 to 4
    requests replay the graphs of their padded sizes, and the steps that mix a prefill with decodes
    run the eager model. Every token is HF's."""
    folder, expected = model
    lengths = MIXED_LENGTHS
    result = run_offline(
        folder, tmp_path / "out.json", "--graphs", "FULL_DECODE_ONLY", "--max-num-seqs", "4",
        "--max-tokens", ",".join(map(str, lengths)),
    )  # fmt: skip
    assert result["graphs"]["replays"] > 0, result["graphs"]
    want = [tokens[:n] for tokens, n in zip(expected, lengths, strict=True)]
    assert result["tokens"] == want, _first_divergence(result["tokens"], want)


def test_continuous_batching_mixes_prefill_and_decode_and_equals_hf(model, tmp_path):
    """At most four sequences at once and a different length for each prompt: as one finishes,
    the next prompt's prefill joins a step with the others' decodes. Each prompt's tokens are the
    first tokens of HF's."""
    folder, expected = model
    lengths = MIXED_LENGTHS
    result = run_offline(
        folder, tmp_path / "out.json", "--max-tokens", ",".join(map(str, lengths)), "--max-num-seqs", "4"
    )
    want = [tokens[:n] for tokens, n in zip(expected, lengths, strict=True)]
    assert result["tokens"] == want, _first_divergence(result["tokens"], want)


def test_chunked_prefill_equals_hf(model, tmp_path):
    """32 tokens per step: the 85- and 47-token prompts are prefilled in chunks, each chunk's
    queries attending to the chunks already in the cache."""
    folder, expected = model
    result = run_offline(folder, tmp_path / "out.json", "--max-num-batched-tokens", "32", "--max-num-seqs", "4")
    assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)


def test_prefix_caching_reuses_blocks_and_equals_hf(model, tmp_path):
    """Prompts sharing a long prefix, with prefix caching on: later prompts start from the cached
    blocks of the first (their first query token is past position 0)."""
    folder, _ = model
    base = tiny_models.PROMPTS[5]
    prompts = [base, base + " Then", base + " A block used on another stream", base]
    prompts_file = tmp_path / "prompts.json"
    prompts_file.write_text(json.dumps(prompts))
    expected = tiny_models.hf_greedy(folder, prompts, 16)
    result = run_offline(
        folder, tmp_path / "out.json", "--prompts-json", str(prompts_file), "--max-tokens", "16",
        "--prefix-caching", "--max-num-seqs", "1",
    )  # fmt: skip
    assert result["tokens"] == expected, _first_divergence(result["tokens"], expected)
    # The 85-token prefix fills 5 blocks of 16: the first prompt computes them, the others find them.
    assert result["cached_tokens"][0] == 0
    assert all(cached >= 80 for cached in result["cached_tokens"][1:]), result["cached_tokens"]


def test_kv_cache_blocks_follow_openreg_device_memory(tmp_path):
    """vLLM sizes the cache from the device's capacity (OPENREG_DEVICE_MEMORY) times
    gpu_memory_utilization, less what the model and the profiling run took: 256 MiB more of
    device memory at utilization 0.5 is 128 MiB more of cache, to within a block."""
    folder = tiny_models.build("llama", tmp_path / "llama")
    runs = {}
    for memory in ("512M", "768M"):
        runs[memory] = run_offline(
            folder, tmp_path / f"{memory}.json", "--max-tokens", "4", env={"OPENREG_DEVICE_MEMORY": memory}
        )
        assert runs[memory]["device"]["total_memory"] == int(memory[:-1]) << 20
    config = tiny_models.transformers.AutoConfig.from_pretrained(folder)
    head_size = config.hidden_size // config.num_attention_heads
    # Keys and values, float32, every layer, for one block of tokens.
    block_bytes = 2 * 4 * config.num_hidden_layers * config.num_key_value_heads * head_size * runs["512M"]["block_size"]
    extra_blocks = runs["768M"]["num_blocks"] - runs["512M"]["num_blocks"]
    assert abs(extra_blocks * block_bytes - (128 << 20)) <= block_bytes, (runs, block_bytes)


def test_prompt_longer_than_the_model_gets_vllms_error(tmp_path):
    folder = tiny_models.build("llama", tmp_path / "llama")
    prompts_file = tmp_path / "prompts.json"
    prompts_file.write_text(json.dumps(["stream " * 300]))
    with pytest.raises(AssertionError) as failure:
        run_offline(folder, tmp_path / "out.json", "--prompts-json", str(prompts_file), "--max-tokens", "4")
    message = str(failure.value)
    assert "VLLMValidationError: This model's maximum context length is 256 tokens" in message, message[-3000:]


def test_cache_smaller_than_one_sequence_gets_vllms_error(tmp_path):
    """A KV cache of 8 blocks of 16 tokens cannot hold one 256-token sequence: vLLM refuses at
    start-up and names the longest sequence that would fit, 7 blocks (vLLM keeps block 0 as its
    null block) of 16 tokens."""
    folder = tiny_models.build("llama", tmp_path / "llama")
    config = tiny_models.transformers.AutoConfig.from_pretrained(folder)
    head_size = config.hidden_size // config.num_attention_heads
    token_bytes = 2 * 4 * config.num_hidden_layers * config.num_key_value_heads * head_size
    with pytest.raises(AssertionError) as failure:
        run_offline(folder, tmp_path / "out.json", "--kv-cache-memory-bytes", str(128 * token_bytes))
    message = str(failure.value)
    assert "To serve at least one request with the model's max seq len (256)" in message, message[-3000:]
    assert "the estimated maximum model length is 112" in message, message[-3000:]
