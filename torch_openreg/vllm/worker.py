"""`OpenRegWorker` and `OpenRegModelRunner`: vLLM's GPU worker and v1 model runner on openreg.

vLLM's `Worker` (vllm/v1/worker/gpu_worker.py) and `GPUModelRunner` (gpu_model_runner.py) are
written against `torch.accelerator` for everything the openreg allocator and streams provide:
memory snapshots and profiling (`get_memory_info`, `memory_stats`, `memory_reserved`,
`empty_cache`), synchronization, events for the sampled-token copy. Only two places name CUDA on the
path a single openreg device takes, and both are overridden here rather than patched:

- `Worker.init_device` accepts device type "cuda" only; ours does the same steps for "openreg";
- `Worker._maybe_get_memory_pool_context` hands any platform other than CUDA, XPU and the CPU
  vLLM's cumem allocator (sleep mode), which is CUDA's; openreg has no sleep mode, so no pool;
- `Worker.compile_or_warm_up_model` runs vLLM's kernel warm-ups, which import CUDA-only modules
  whatever the platform (Note [vLLM's warm-up on openreg]).

Graphs (Note [vLLM's graph capture on openreg]) need two more: the runner wraps the model for FULL
graphs with vLLM's CUDA wrapper by name, and captures inside `graph_capture`, which makes a
`torch.cuda.Stream`.
"""

from __future__ import annotations

import contextlib
import gc
import logging

import torch
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.compilation.monitor import set_cudagraph_capturing_enabled
from vllm.config import CUDAGraphMode
from vllm.distributed.parallel_state import get_pp_group
from vllm.platforms import current_platform
from vllm.utils.mem_utils import MemorySnapshot
from vllm.utils.torch_utils import set_random_seed
from vllm.v1.worker.gpu_model_runner import GPUModelRunner
from vllm.v1.worker.gpu_worker import Worker, init_worker_distributed_environment
from vllm.v1.worker.utils import request_memory
from vllm.v1.worker.worker_base import CompilationTimes
from vllm.v1.worker.workspace import lock_workspace

from .._C import DEVICE_NAME
from .graphs import OpenRegGraphWrapper

logger = logging.getLogger(__name__)


# [marker: vllm-model-runner]
class OpenRegModelRunner(GPUModelRunner):
    """vLLM's v1 model runner, unchanged: its inputs live in `CpuGpuBuffer`s (pinned host memory
    and an openreg copy), its KV cache is one openreg allocation viewed per layer, and each layer's
    attention runs `torch_openreg.vllm.attention`. Zeroing newly allocated cache blocks is the one
    step it does with a Triton kernel of its own rather than one vLLM lets a platform replace by
    name, so the runner's two methods for it are overridden."""

    def _init_kv_zero_meta(self) -> None:
        # vLLM precomputes raw addresses for its Triton zeroing kernel here; indexing needs none.
        return

    def _zero_block_ids(self, block_ids: list[int]) -> None:
        """Zeroes the given blocks of every attention layer's cache view, as vLLM asks before new
        blocks are written in part."""
        if not block_ids:
            return
        index = torch.tensor(block_ids, dtype=torch.int64).to(self.device, non_blocking=True)
        zeroed: set[int] = set()
        for layer in self.compilation_config.static_forward_context.values():
            cache = getattr(layer, "kv_cache", None)
            if not isinstance(cache, torch.Tensor) or cache.dim() != 4 or cache.data_ptr() in zeroed:
                continue
            zeroed.add(cache.data_ptr())  # layers that share a cache share its zeroing
            cache.index_fill_(0, index, 0)

    # Note [vLLM's graph capture on openreg]
    # Two places of vLLM's v1 runner name CUDA on the way to graphs, and both are methods of the
    # runner, so this subclass replaces them rather than anything of vLLM's:
    # - load_model wraps the model for FULL graphs in compilation/cuda_graph.py's CUDAGraphWrapper
    #   by name (the platform's get_static_graph_wrapper_cls is asked only for PIECEWISE pieces);
    #   the model is rewrapped in OpenRegGraphWrapper (graphs.py) around the same runnable;
    # - capture_model enters distributed/parallel_state.py's graph_capture, whose first line makes
    #   a torch.cuda.Stream for the capture (and whose group contexts assert a CUDA or XPU
    #   communicator). Ours captures the same batch descriptors, through the runner's own
    #   _capture_cudagraphs (a warm-up run, then the run the wrapper captures), on an openreg side
    #   stream that waits for the current one, with the garbage collector frozen as vLLM does.
    # vLLM's memory profile of the graphs (profile_cudagraph_memory) runs for CUDA, ROCm and XPU
    # only, so the KV cache is sized without it (docs/vllm.md, "Graphs", gives what capture took).
    def load_model(self, *args, **kwargs) -> None:
        super().load_model(*args, **kwargs)
        if type(self.model) is CUDAGraphWrapper:
            self.model = OpenRegGraphWrapper(self.model.runnable, self.vllm_config, runtime_mode=CUDAGraphMode.FULL)

    # [marker: vllm-capture-model]
    def capture_model(self) -> int:
        if self.compilation_config.cudagraph_mode == CUDAGraphMode.NONE:
            return 0
        torch.accelerator.synchronize()
        free_before = torch.accelerator.get_memory_info()[0]
        side = torch.Stream(self.device)
        side.wait_stream(torch.accelerator.current_stream(self.device))
        set_cudagraph_capturing_enabled(True)
        try:
            with self._freeze_gc(), side:
                for mode, descriptors in self.cudagraph_dispatcher.get_capture_descs():
                    self._capture_cudagraphs(batch_descriptors=descriptors, cudagraph_runtime_mode=mode)
                torch.accelerator.synchronize()
        finally:
            set_cudagraph_capturing_enabled(False)
        lock_workspace()
        captured = free_before - torch.accelerator.get_memory_info()[0]
        OpenRegGraphWrapper.stats.capture_bytes = captured
        logger.info("%s: captured %d graphs, %d bytes", DEVICE_NAME, OpenRegGraphWrapper.stats.captures, captured)
        return captured


# [marker: vllm-worker]
class OpenRegWorker(Worker):
    """One openreg device per worker (`openreg:<local rank>`)."""

    def init_device(self) -> None:
        self.device = torch.device(current_platform.device_type, self.local_rank)
        torch.accelerator.set_device_index(self.device)
        current_platform.check_if_supports_dtype(self.model_config.dtype)
        init_worker_distributed_environment(
            self.vllm_config,
            self.rank,
            self.distributed_init_method,
            self.local_rank,
            current_platform.dist_backend,
        )
        set_random_seed(self.model_config.seed)
        # The snapshot vLLM sizes the KV cache from: free and total memory of the device
        # (OPENREG_DEVICE_MEMORY), after the allocator has returned its cached blocks.
        gc.collect()
        torch.accelerator.empty_cache()
        self.init_snapshot = MemorySnapshot(device=self.device)
        self.requested_memory = request_memory(self.init_snapshot, self.cache_config)
        logger.debug("openreg worker memory snapshot: %r", self.init_snapshot)
        self._init_workspace_and_model_runner()

    def _make_model_runner(self) -> OpenRegModelRunner:
        return OpenRegModelRunner(self.vllm_config, self.device)

    def _maybe_get_memory_pool_context(self, tag: str) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    # Note [vLLM's warm-up on openreg]
    # vLLM's Worker.compile_or_warm_up_model warms the compiled sizes, then calls kernel_warmup
    # (vllm/model_executor/warmup/kernel_warmup.py), whose step5_dsa_warmup imports
    # vllm/models/step5/nvidia/sparse_attention.py on every platform; that module reads
    # `tl.extra.cuda` at import, which fails wherever Triton has no active driver (here: no GPU),
    # so vLLM's own warm-up cannot run on openreg. The CPU platform's worker replaces the method
    # for the same reason. Ours keeps what applies to an eager openreg model: a dummy forward and
    # sampling step at the largest batch of sequences, then the seed reset (the profiling run must
    # not change which random numbers requests get). Then, unless the model is eager, the runner
    # captures its graphs (Note [vLLM's graph capture on openreg]).
    def compile_or_warm_up_model(self) -> CompilationTimes:
        # Only the last pipeline stage samples (an earlier one's forward gives no hidden states to
        # sample from), as in vLLM's own warm-up.
        if get_pp_group().is_last_rank:
            runner = self.model_runner
            requests = min(self.scheduler_config.max_num_seqs, self.scheduler_config.max_num_batched_tokens)
            _, last_hidden_states = runner._dummy_run(
                num_tokens=requests, skip_eplb=True, cudagraph_runtime_mode=CUDAGraphMode.NONE
            )
            runner._dummy_sampler_run(hidden_states=last_hidden_states)
        if not self.model_config.enforce_eager:
            self.model_runner.capture_model()
        set_random_seed(self.model_config.seed, self.parallel_config.data_parallel_index)
        return CompilationTimes(
            language_model=self.compilation_config.compilation_time,
            encoder=self.compilation_config.encoder_compilation_time,
        )
