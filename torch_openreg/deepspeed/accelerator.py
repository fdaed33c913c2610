"""`OpenRegAccelerator`: every method of DeepSpeed's `DeepSpeedAccelerator`
(accelerator/abstract_accelerator.py) answered by torch.openreg."""

from __future__ import annotations

import functools
from typing import Any

import torch
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator

from .._C import DEVICE_NAME


def _constructor(dtype: torch.dtype) -> property:
    """A property giving `torch.tensor` for `dtype` on openreg, as DeepSpeed's FloatTensor and kin."""
    return property(lambda self: functools.partial(torch.tensor, dtype=dtype, device=DEVICE_NAME))


# [marker: deepspeed-accelerator]
class OpenRegAccelerator(DeepSpeedAccelerator):
    """Devices, generators, streams and events, memory statistics, dtypes, graphs and pinning from
    torch.openreg; collectives on occl (docs/distributed.md). No op builders: DeepSpeed's compiled
    kernels are CUDA or CPU code, so `create_op_builder` and `get_op_builder` answer None and
    DeepSpeed takes its PyTorch paths (give `deepspeed.initialize` a torch optimizer)."""

    def __init__(self) -> None:
        super().__init__()
        self._name = DEVICE_NAME
        self._communication_backend_name = "occl"
        self._compile_backend = DEVICE_NAME  # torch.compile's backend for the device (docs/compile.md)

    # Execution model: asynchronous streams, like CUDA's, so DeepSpeed times with events and
    # orders work with streams instead of assuming each call has finished.
    def is_synchronized_device(self) -> bool:
        return False

    def use_host_timers(self) -> bool:
        return self.is_synchronized_device()

    def resolves_data_dependency(self) -> bool:
        return self.is_synchronized_device()

    def handles_memory_backpressure(self) -> bool:
        return self.is_synchronized_device()

    # Devices
    def device_name(self, device_index: int | None = None) -> str:
        return DEVICE_NAME if device_index is None else f"{DEVICE_NAME}:{device_index}"

    def device(self, device_index: int | None = None) -> torch.device:
        return torch.device(DEVICE_NAME, device_index)

    def set_device(self, device_index: int) -> None:
        torch.openreg.set_device(device_index)

    def current_device(self) -> int:
        return torch.openreg.current_device()

    def current_device_name(self) -> str:
        return self.device_name(self.current_device())

    def device_count(self) -> int:
        return torch.openreg.device_count()

    def synchronize(self, device_index: int | None = None) -> None:
        torch.openreg.synchronize(device_index)

    def is_available(self) -> bool:
        return torch.openreg.is_available()

    # Random numbers: each device's own generator, equal to the CPU's for the same seed.
    def random(self) -> Any:
        return torch.random

    def set_rng_state(self, new_state: torch.Tensor, device_index: int | None = None) -> None:
        torch.openreg.set_rng_state(new_state, DEVICE_NAME if device_index is None else device_index)

    def get_rng_state(self, device_index: int | None = None) -> torch.Tensor:
        return torch.openreg.get_rng_state(DEVICE_NAME if device_index is None else device_index)

    def manual_seed(self, seed: int) -> None:
        torch.openreg.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.openreg.manual_seed_all(seed)

    def initial_seed(self) -> int:
        return torch.openreg.initial_seed()

    def default_generator(self, device_index: int) -> torch.Generator:
        return torch.openreg.default_generators[device_index]

    # Streams and events
    @property
    def Stream(self) -> type:
        return torch.openreg.Stream

    def stream(self, stream: torch.Stream) -> Any:
        return torch.openreg.stream(stream)

    def current_stream(self, device_index: int | None = None) -> torch.Stream:
        return torch.openreg.current_stream(device_index)

    def default_stream(self, device_index: int | None = None) -> torch.Stream:
        return torch.openreg.default_stream(device_index)

    @property
    def Event(self) -> Any:
        return torch.openreg.Event

    # Memory: the caching allocator's statistics; "cached" is CUDA's old word for reserved.
    def empty_cache(self) -> None:
        torch.openreg.empty_cache()

    def memory_allocated(self, device_index: int | None = None) -> int:
        return torch.openreg.memory_allocated(device_index)

    def max_memory_allocated(self, device_index: int | None = None) -> int:
        return torch.openreg.max_memory_allocated(device_index)

    def reset_max_memory_allocated(self, device_index: int | None = None) -> None:
        torch.openreg.reset_peak_memory_stats(device_index)

    def memory_cached(self, device_index: int | None = None) -> int:
        return torch.openreg.memory_reserved(device_index)

    def max_memory_cached(self, device_index: int | None = None) -> int:
        return torch.openreg.max_memory_reserved(device_index)

    def reset_max_memory_cached(self, device_index: int | None = None) -> None:
        torch.openreg.reset_peak_memory_stats(device_index)

    def memory_stats(self, device_index: int | None = None) -> dict[str, Any]:
        return torch.openreg.memory_stats(device_index)

    def reset_peak_memory_stats(self, device_index: int | None = None) -> None:
        torch.openreg.reset_peak_memory_stats(device_index)

    def memory_reserved(self, device_index: int | None = None) -> int:
        return torch.openreg.memory_reserved(device_index)

    def max_memory_reserved(self, device_index: int | None = None) -> int:
        return torch.openreg.max_memory_reserved(device_index)

    def total_memory(self, device_index: int | None = None) -> int:
        return torch.openreg.mem_get_info(device_index)[1]

    def available_memory(self, device_index: int | None = None) -> int:
        return torch.openreg.mem_get_info(device_index)[0]

    # Data types: every operator runs the CPU's kernel, float16 and bfloat16 included.
    def is_bf16_supported(self) -> bool:
        return torch.openreg.is_bf16_supported()

    def is_fp16_supported(self) -> bool:
        return True

    def supported_dtypes(self) -> list[torch.dtype]:
        return [torch.float, torch.half, torch.bfloat16]

    # Profiler ranges: NVTX's counterpart is none; torch.profiler records the device's own activity
    # (docs/profiling.md), as the CPU accelerator's ranges are no-ops too.
    def range_push(self, msg: str, domain: Any = None, category: Any = None) -> None:
        return None

    def range_pop(self, domain: Any = None) -> None:
        return None

    def lazy_call(self, callback: Any) -> Any:
        # Nothing to defer: the device initializes on first use by itself.
        return callback()

    def communication_backend_name(self) -> str:
        return self._communication_backend_name

    def is_triton_supported(self) -> bool:
        return False

    # Graphs: torch.openreg.Graph captures a stream's work and replays it as one launch (docs/graphs.md).
    def is_current_stream_capturing(self) -> bool:
        return torch.openreg.is_current_stream_capturing()

    def create_graph(self) -> Any:
        return torch.openreg.Graph()

    def capture_to_graph(self, graph: Any, pool: Any = None, stream: Any = None) -> Any:
        return torch.openreg.graph(graph, pool=pool, stream=stream)

    def replay_graph(self, graph: Any) -> None:
        graph.replay()

    # Tensor constructors in the legacy typed-tensor style DeepSpeed calls (torch.tensor on the device).
    BFloat16Tensor = _constructor(torch.bfloat16)
    ByteTensor = _constructor(torch.uint8)
    DoubleTensor = _constructor(torch.double)
    FloatTensor = _constructor(torch.float)
    HalfTensor = _constructor(torch.half)
    IntTensor = _constructor(torch.int)
    LongTensor = _constructor(torch.long)

    def on_accelerator(self, tensor: torch.Tensor) -> bool:
        return tensor.device.type == DEVICE_NAME

    # Op builders: none (see the class note).
    def op_builder_dir(self) -> str:
        return "deepspeed.ops.op_builder"

    def create_op_builder(self, class_name: str) -> None:
        return None

    def get_op_builder(self, class_name: str) -> None:
        return None

    def build_extension(self) -> Any:
        from torch.utils.cpp_extension import BuildExtension

        return BuildExtension

    # Launcher environment: the prefix of openreg's configuration variables, which DeepSpeed's
    # multi-node runner copies to every node; no variable hides devices from a process (a rank picks
    # its device by LOCAL_RANK).
    def export_envs(self) -> list[str]:
        return ["OPENREG"]

    def visible_devices_envs(self) -> list[str]:
        return []

    def set_visible_devices_envs(self, current_env: dict, local_accelerator_ids: list[int]) -> None:
        return None

    def get_compile_backend(self) -> str:
        return self._compile_backend

    def set_compile_backend(self, backend: str) -> None:
        supported = torch._dynamo.list_backends(exclude_tags=())
        if backend not in supported:
            raise ValueError(f"{backend} is not a torch.compile backend here; these are: {supported}")
        self._compile_backend = backend
