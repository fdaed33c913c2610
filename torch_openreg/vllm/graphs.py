"""`OpenRegGraphWrapper`: vLLM's static graph wrapper on `torch.accelerator.Graph` (docs/vllm.md, "Graphs").

vLLM captures a model (a FULL graph: the whole forward of a padded decode batch) or the pieces of a
compiled model between attention calls (PIECEWISE) once per batch size, and replays them on later
steps of that size. It finds the class through two doors:

- `Platform.get_static_graph_wrapper_cls`, which its compile backend asks for the PIECEWISE pieces
  (`compilation/backends.py`, `compilation/decorators.py`);
- the v1 runner's `load_model`, which wraps the whole model for FULL graphs with
  `compilation/cuda_graph.py`'s `CUDAGraphWrapper` by name; `OpenRegModelRunner.load_model`
  rewraps it with this class (worker.py).

See Note [Graph capture and replay for vLLM].
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import torch
from vllm.compilation.counter import compilation_counter
from vllm.compilation.cuda_graph import CUDAGraphWrapper
from vllm.compilation.monitor import validate_cudagraph_capturing_enabled
from vllm.config import CUDAGraphMode
from vllm.forward_context import get_forward_context, is_forward_context_available


@dataclasses.dataclass
class GraphStats:
    """Per process: graphs captured and replays launched by every wrapper (tests read it)."""

    captures: int = 0
    replays: int = 0
    capture_bytes: int = 0  # device memory the runner's capture_model took (free memory before - after)
    # "FULL 16": replays of whole-model graphs of 16 tokens; "PIECEWISE 32": of compiled pieces
    replays_by_batch: dict[str, int] = dataclasses.field(default_factory=dict)


# Note [Graph capture and replay for vLLM]
# vLLM's own wrapper (CUDAGraphWrapper.__call__) names torch.cuda.CUDAGraph and torch.cuda.graph,
# and hands the output back through torch.ops._C.weak_ref_tensor, an operator of vLLM's CUDA
# extension; none of them exists for openreg. This subclass keeps vLLM's dispatch contract (the
# forward context's runtime mode and batch descriptor choose between running the model, capturing
# it and replaying it; one entry per descriptor) and captures with torch.accelerator.Graph, which
# is torch.openreg's graph (docs/graphs.md):
# - capture on the current stream (the runner's capture stream, worker.py), allocating from the
#   platform's global pool (graph_pool_handle), in thread-local mode: vLLM's other threads in the
#   worker's process (its output and logging threads) may allocate openreg memory meanwhile, which
#   the global mode would refuse;
# - the output is kept alive by the entry (a strong reference, where vLLM keeps a weak one to give
#   its memory back to the pool): the replay writes into it, and vLLM reads it before the next
#   replay of any graph (docs/graphs.md, "Memory: private pools");
# - the inputs vLLM passes are its persistent buffers (input ids, positions) and the attention
#   metadata is in the builder's persistent buffers (attention.py, Note [Decode metadata in fixed
#   buffers]), so a replay reads what the step wrote there.
class OpenRegGraphWrapper(CUDAGraphWrapper):
    stats: ClassVar[GraphStats] = GraphStats()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not is_forward_context_available():
            return self.runnable(*args, **kwargs)
        context = get_forward_context()
        mode = context.cudagraph_runtime_mode
        if mode == CUDAGraphMode.NONE or mode != self.runtime_mode:
            return self.runnable(*args, **kwargs)  # warm-up, profiling, eager steps, other wrappers
        descriptor = context.batch_descriptor
        assert descriptor is not None, "vLLM dispatched a graph without a batch descriptor"
        entry = self.concrete_cudagraph_entries.get(descriptor)
        if entry is None or entry.cudagraph is None:
            return self._capture(descriptor, args, kwargs)
        entry.cudagraph.replay()
        stats = OpenRegGraphWrapper.stats
        stats.replays += 1
        batch = f"{mode.name} {descriptor.num_tokens}"
        stats.replays_by_batch[batch] = stats.replays_by_batch.get(batch, 0) + 1
        return entry.output

    def _capture(self, descriptor: Any, args: tuple, kwargs: dict) -> Any:
        from vllm.compilation.cuda_graph import CUDAGraphEntry

        validate_cudagraph_capturing_enabled()  # vLLM's guard: captures only inside capture_model
        graph = torch.accelerator.Graph(pool=self.graph_pool, capture_error_mode="thread_local")
        graph.capture_begin()
        try:
            output = self.runnable(*args, **kwargs)
        finally:
            graph.capture_end()
        self.concrete_cudagraph_entries[descriptor] = CUDAGraphEntry(
            batch_descriptor=descriptor, cudagraph=graph, output=output
        )
        OpenRegGraphWrapper.stats.captures += 1
        compilation_counter.num_cudagraph_captured += 1
        return output


def graph_stats(model: Any = None) -> dict:
    """The process's `OpenRegGraphWrapper.stats` as a dict (for `LLM.apply_model`, which passes the
    model)."""
    return dataclasses.asdict(OpenRegGraphWrapper.stats)
