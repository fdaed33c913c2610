"""One offline vLLM run on openreg, in its own interpreter (the vLLM suite runs each configuration
fresh, since the device's memory size and vLLM's engine are fixed per process).

    python offline_run.py MODEL_DIR OUT.json [--max-tokens 8,16,...] [--max-num-seqs N]
        [--max-num-batched-tokens N] [--prefix-caching] [--prompts-json FILE] [--kv-cache-memory-bytes N]
        [--compile] [--graphs MODE]

Greedy decoding with `ignore_eos`; writes the generated token ids of each prompt, the number of KV
cache blocks vLLM allocated, and what the worker saw of the device (the platform class, the
model's parameter devices, the allocator's bytes in use) to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys

# vLLM's defaults: the engine core in a process of its own, forked from this one, which must
# therefore not have initialized openreg (Note [vLLM's questions before its engine starts] in
# torch_openreg/vllm/platform.py). --in-process keeps the engine in this process.
if "--in-process" in sys.argv:
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
# Lets apply_model send tiny_models.device_state (a function) to the workers in vLLM's processes; it
# changes how vLLM serializes this test's own requests, nothing of the run.
os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny_models


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model")
    parser.add_argument("out")
    parser.add_argument("--max-tokens", default="32", help="one value, or one per prompt (comma-separated)")
    parser.add_argument("--max-num-seqs", type=int, default=16)
    parser.add_argument("--max-num-batched-tokens", type=int, default=None)
    parser.add_argument("--prefix-caching", action="store_true")
    parser.add_argument("--prompts-json", default=None, help="a JSON list of prompts (default: tiny_models.PROMPTS)")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.5)
    parser.add_argument("--kv-cache-memory-bytes", type=int, default=None)
    parser.add_argument("--compile", action="store_true", help="vLLM's torch.compile (default: enforce_eager)")
    parser.add_argument(
        "--graphs",
        default=None,
        help="vLLM's cudagraph_mode (FULL_DECODE_ONLY, FULL_AND_PIECEWISE, ...), or 'default' for "
        "vLLM's own choice; without --compile the model runs eagerly between graphs (compilation "
        "mode NONE). Default: no graphs",
    )
    parser.add_argument("--in-process", action="store_true", help="the engine core in this process")
    parser.add_argument("--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--pipeline-parallel-size", type=int, default=1)
    parser.add_argument("--use-device-first", action="store_true", help="put a tensor on openreg before vLLM starts")
    args = parser.parse_args()

    import torch
    from vllm import LLM, SamplingParams
    from vllm.platforms import current_platform

    if args.use_device_first:
        torch.ones(1, device="openreg")

    prompts = json.loads(pathlib.Path(args.prompts_json).read_text()) if args.prompts_json else tiny_models.PROMPTS
    lengths = [int(n) for n in args.max_tokens.split(",")]
    if len(lengths) == 1:
        lengths = lengths * len(prompts)
    extra = {}
    if args.max_num_batched_tokens is not None:
        extra["max_num_batched_tokens"] = args.max_num_batched_tokens
    if args.kv_cache_memory_bytes is not None:
        extra["kv_cache_memory_bytes"] = args.kv_cache_memory_bytes
    if args.compile or args.graphs:
        extra["compilation_config"] = {"mode": "VLLM_COMPILE" if args.compile else "NONE"}
        if args.graphs != "default":
            extra["compilation_config"]["cudagraph_mode"] = args.graphs or "NONE"
    llm = LLM(
        model=args.model,
        dtype="float32",
        max_model_len=tiny_models.MAX_POSITIONS,
        max_num_seqs=args.max_num_seqs,
        enable_prefix_caching=args.prefix_caching,
        gpu_memory_utilization=args.gpu_memory_utilization,
        seed=0,
        enforce_eager=not (args.compile or args.graphs),
        tensor_parallel_size=args.tensor_parallel_size,
        pipeline_parallel_size=args.pipeline_parallel_size,
        **extra,
    )
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lengths]
    outputs = llm.generate(prompts, params)
    states = llm.apply_model(tiny_models.device_state)  # one per worker
    from torch_openreg.vllm.graphs import graph_stats

    graphs = llm.apply_model(graph_stats)  # captures and replays in each worker's process
    result = {
        "platform": type(current_platform).__qualname__,
        "tokens": [list(output.outputs[0].token_ids) for output in outputs],
        "cached_tokens": [output.num_cached_tokens for output in outputs],
        "num_blocks": llm.llm_engine.vllm_config.cache_config.num_gpu_blocks,
        "block_size": llm.llm_engine.vllm_config.cache_config.block_size,
        "compilation_mode": llm.llm_engine.vllm_config.compilation_config.mode.name,
        "cudagraph_mode": llm.llm_engine.vllm_config.compilation_config.cudagraph_mode.name,
        "graphs": graphs[0],
        "device": states[0],
        "worker_devices": [state["device"] for state in states],
        "engine_in_process": os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0",
        "multiproc_method": os.environ.get("VLLM_WORKER_MULTIPROC_METHOD", "fork"),
        # Whether this process initialized openreg: by default only the engine core's worker does.
        "initialized_here": torch.openreg.is_initialized(),
    }
    pathlib.Path(args.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()
