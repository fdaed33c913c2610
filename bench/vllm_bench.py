"""vLLM on openreg against Hugging Face's `generate` on the CPU (docs/vllm.md, "Measured").

The models and prompts of the vLLM suite (tests/vllm/tiny_models.py: a small Llama and a small
GPT-2, ten prompts of 1 to 85 tokens), greedy, `--max-tokens` new tokens per prompt. Per model:

- **offline batch, tokens/s**: generated tokens of the ten prompts over the wall time. vLLM on
  openreg gets the ten prompts in one `LLM.generate` (continuous batching); Hugging Face on the
  CPU, the user's alternative on a CPU-only machine, runs `generate` prompt after prompt (a batch
  would need padding, which changes a small model's greedy tokens);
- **TTFT**: time to first token of one request alone, the median over the ten prompts of the wall
  time of a request for one new token (vLLM: `LLM.generate` with max_tokens=1; HF: `generate` with
  max_new_tokens=1);
- whether vLLM's tokens equal HF's (the bench's figures are only worth reading if they do).

Each vLLM measurement runs in a fresh interpreter (`--child`) with vLLM's defaults (its engine core
in a process of its own), after one warm-up generate, in one of five modes (MODES):

- `eager`: `enforce_eager`;
- `compiled`: vLLM's torch.compile (Inductor on openreg) without graphs (`cudagraph_mode` NONE);
- `graphs`: vLLM's defaults, torch.compile with graphs (`FULL_AND_PIECEWISE`: decode batches
  replay one graph of the whole model, other batches replay the compiled pieces between attention
  calls; torch_openreg/vllm/graphs.py);
- `graphs-eager`: graphs of decode batches around the eager model (compilation mode NONE,
  `FULL_DECODE_ONLY`);
- `tp2`: eager with tensor parallelism 2 (a worker on each of `openreg:0` and `openreg:1`; graphs
  stay off with more than one rank).

    python bench/vllm_bench.py [--max-tokens 64] [--repeats 3] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "vllm"))
import tiny_models  # noqa: E402


def hf_cpu(folder: pathlib.Path, max_tokens: int, repeats: int) -> dict:
    tokenizer, model = tiny_models.hf_model(folder)
    prompts = [tokenizer(p).input_ids for p in tiny_models.PROMPTS]
    tiny_models.hf_generate(tokenizer, model, prompts[0], 2)  # warm-up
    batch_times, tokens = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        tokens = [tiny_models.hf_generate(tokenizer, model, ids, max_tokens) for ids in prompts]
        batch_times.append(time.perf_counter() - start)
    first = []
    for ids in prompts:
        start = time.perf_counter()
        tiny_models.hf_generate(tokenizer, model, ids, 1)
        first.append(time.perf_counter() - start)
    return {"batch_seconds": statistics.median(batch_times), "ttft_seconds": statistics.median(first), "tokens": tokens}


# The LLM(...) arguments of each mode (the module's docstring).
MODES = {
    "eager": {"enforce_eager": True},
    "compiled": {"compilation_config": {"cudagraph_mode": "NONE"}},
    "graphs": {},
    "graphs-eager": {"compilation_config": {"mode": "NONE", "cudagraph_mode": "FULL_DECODE_ONLY"}},
    "tp2": {"enforce_eager": True, "tensor_parallel_size": 2},
}


def vllm_openreg(folder: pathlib.Path, max_tokens: int, repeats: int, mode: str) -> dict:
    from vllm import LLM, SamplingParams

    llm = LLM(model=str(folder), dtype="float32", max_model_len=tiny_models.MAX_POSITIONS, seed=0,
              gpu_memory_utilization=0.5, **MODES[mode])  # fmt: skip
    batch = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    one = SamplingParams(temperature=0.0, max_tokens=1, ignore_eos=True)
    llm.generate(tiny_models.PROMPTS[:2], batch, use_tqdm=False)  # warm-up
    batch_times, tokens = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = llm.generate(tiny_models.PROMPTS, batch, use_tqdm=False)
        batch_times.append(time.perf_counter() - start)
        tokens = [list(o.outputs[0].token_ids) for o in outputs]
    first = []
    for prompt in tiny_models.PROMPTS:
        start = time.perf_counter()
        llm.generate([prompt], one, use_tqdm=False)
        first.append(time.perf_counter() - start)
    from torch_openreg.vllm.graphs import graph_stats

    return {"batch_seconds": statistics.median(batch_times), "ttft_seconds": statistics.median(first), "tokens": tokens,
            "graphs": llm.apply_model(graph_stats)[0]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", nargs=3, metavar=("MODEL_DIR", "OUT", "MODE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = vllm_openreg(pathlib.Path(args.child[0]), args.max_tokens, args.repeats, args.child[2])
        pathlib.Path(args.child[1]).write_text(json.dumps(result))
        return

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for kind in ("llama", "gpt2"):
            folder = tiny_models.build(kind, pathlib.Path(scratch) / kind)
            vllm = {}
            for mode in MODES:
                out = pathlib.Path(scratch) / f"{kind}-{mode}.json"
                subprocess.run(
                    [sys.executable, __file__, "--max-tokens", str(args.max_tokens), "--repeats", str(args.repeats),
                     "--child", str(folder), str(out), mode],
                    # VLLM_ALLOW_INSECURE_SERIALIZATION: lets apply_model bring the graph counts
                    # back from the engine core's process (tests/vllm/offline_run.py does the same).
                    check=True, env={**os.environ, "VLLM_DISABLE_COMPILE_CACHE": "1",
                                     "VLLM_ALLOW_INSECURE_SERIALIZATION": "1"},
                )  # fmt: skip
                vllm[mode] = json.loads(out.read_text())
            hf = hf_cpu(folder, args.max_tokens, args.repeats)
            generated = len(tiny_models.PROMPTS) * args.max_tokens
            row = {"model": kind, "tokens_equal": {m: vllm[m]["tokens"] == hf["tokens"] for m in vllm}}
            for mode, result in vllm.items():
                row[f"vllm_openreg_{mode}_tokens_per_s"] = generated / result["batch_seconds"]
                row[f"vllm_openreg_{mode}_ttft_ms"] = 1000 * result["ttft_seconds"]
                row[f"vllm_openreg_{mode}_graph_replays"] = result["graphs"]["replays"]
            row["hf_cpu_tokens_per_s"] = generated / hf["batch_seconds"]
            row["hf_cpu_ttft_ms"] = 1000 * hf["ttft_seconds"]
            row["graphs_over_eager"] = row["vllm_openreg_graphs_tokens_per_s"] / row["vllm_openreg_eager_tokens_per_s"]
            rows.append(row)

    print(f"{len(tiny_models.PROMPTS)} prompts x {args.max_tokens} new tokens, greedy, median of {args.repeats}")
    names = {"eager": "eager", "compiled": "compiled", "graphs": "graphs (compiled)", "graphs-eager": "graphs (eager)",
             "tp2": "eager, TP=2"}  # fmt: skip
    header = ["model", *(f"tokens/s: vLLM openreg {names[m]}" for m in MODES), "HF generate CPU", "graphs / eager"]
    header += [*(f"TTFT ms: {names[m]}" for m in MODES), "HF generate CPU", "tokens equal"]
    print("| " + " | ".join(header) + " |")
    print("|---" * (2 * len(MODES) + 5) + "|")
    columns = [f"vllm_openreg_{m}_tokens_per_s" for m in MODES] + ["hf_cpu_tokens_per_s", "graphs_over_eager"]
    columns += [f"vllm_openreg_{m}_ttft_ms" for m in MODES] + ["hf_cpu_ttft_ms"]
    for r in rows:
        figures = " | ".join(
            f"{r[c]:.0f}" if c.endswith("per_s") else f"{r[c]:.2f}" if c == "graphs_over_eager" else f"{r[c]:.1f}"
            for c in columns
        )
        print(f"| {r['model']} | {figures} | {all(r['tokens_equal'].values())} |")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"max_tokens": args.max_tokens, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
