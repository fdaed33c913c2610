"""`OpenRegPlatform`: vLLM's `Platform` for the openreg device (vllm/platforms/interface.py).

vLLM asks its platform everything device-specific: which device type and dispatch key its custom
operators register under, which worker class runs the model, which attention backend each layer
uses, how much memory a device has, which features (graphs, compile, async scheduling) may stay on.
vLLM builds this class once per process from the qualified name that the `vllm.platform_plugins`
entry point returns (`torch_openreg_autoload.vllm_platform`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
from typing import TYPE_CHECKING

import torch
from vllm.platforms.interface import Platform, PlatformEnum

from .._C import DEVICE_NAME

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.v1.attention.backends.registry import AttentionBackendEnum
    from vllm.v1.attention.selector import AttentionSelectorConfig

logger = logging.getLogger(__name__)


# Note [vLLM's model runner on openreg]
# vLLM picks its Triton model runner (v2) whenever Triton imports, as it does beside the CUDA build
# of torch, and that runner's kernels are CUDA's. The device-generic runner (v1, GPUModelRunner) is
# the one that runs on openreg. vLLM reads the choice from VLLM_USE_V2_MODEL_RUNNER while it builds
# its configuration, after it has resolved the platform (this import), so the default is set here;
# the processes vLLM starts inherit it. A user's explicit 1 stays, and check_and_update_config
# refuses it with the reason.
os.environ.setdefault("VLLM_USE_V2_MODEL_RUNNER", "0")


def _disable(reason: str) -> None:
    """One log line per feature the platform turns off, with the reason (docs/vllm.md)."""
    logger.warning("%s: %s", DEVICE_NAME, reason)


# [marker: vllm-spawn]
def _spawn_if_initialized() -> None:
    """vLLM's processes are spawned, not forked, once the program's process has initialized openreg
    (Note [vLLM's questions before its engine starts]); one log line says so. vLLM's own processes
    (the engine core, which builds its configuration again after its worker has initialized the
    device) start no process that uses openreg after that, and are left alone."""
    if os.environ.get("VLLM_WORKER_MULTIPROC_METHOD") == "spawn" or not torch.openreg.is_initialized():
        return
    if multiprocessing.parent_process() is not None:
        return
    logger.warning(
        "%s: this process initialized openreg before vLLM started its processes, and a forked "
        "child cannot use it; overriding VLLM_WORKER_MULTIPROC_METHOD to 'spawn' (the program "
        'needs an `if __name__ == "__main__":` guard, as for CUDA)',
        DEVICE_NAME,
    )
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"


# [marker: vllm-platform]
class OpenRegPlatform(Platform):
    """The openreg device as a vLLM platform: device `openreg`, dispatch key PrivateUse1 (where
    vLLM registers its own custom operators, such as `vllm::unified_attention_with_output`),
    worker `torch_openreg.vllm.worker.OpenRegWorker`, attention backend
    `torch_openreg.vllm.attention.OpenRegAttentionBackend`, collectives on occl."""

    _enum = PlatformEnum.OOT
    device_name = DEVICE_NAME
    device_type = DEVICE_NAME
    dispatch_key = "PrivateUse1"
    dist_backend = "occl"  # torch.distributed's backend for openreg tensors (docs/distributed.md)
    # device_control_env_var keeps vLLM's placeholder: vLLM sets that variable to give each
    # data-parallel engine its devices, and the openreg runtime has no variable that hides devices
    # (docs/ecosystem.md), so data parallelism is refused (check_and_update_config).

    @property
    def supported_dtypes(self) -> list[torch.dtype]:
        # Every operator runs the CPU's kernel, so the CPU's dtypes; float32 first because it is
        # the one whose results equal the CPU's reference models (and the dtype the tests use).
        return [torch.float32, torch.bfloat16, torch.float16]

    # -- devices and memory ---------------------------------------------------------------------
    # Note [vLLM's questions before its engine starts]
    # vLLM asks for the device's name and memory while it builds its configuration, in the process
    # that then forks its engine core (EngineArgs.create_engine_config: get_batch_defaults reads the
    # total memory). The answers come from the runtime's configuration (get_device_properties),
    # which never initializes a device: an initialized parent would leave the forked engine core
    # unable to use openreg ("Cannot re-initialize OpenReg in forked subprocess"). When the program
    # has initialized openreg itself before starting vLLM, check_and_update_config switches vLLM's
    # processes to spawn, as vLLM does for CUDA (vllm/utils/system_utils.py, _maybe_force_spawn).
    @classmethod
    def get_device_name(cls, device_id: int = 0) -> str:
        return torch.openreg.get_device_name(device_id)  # from get_device_properties: no initialization

    @classmethod
    def get_device_uuid(cls, device_id: int = 0) -> str:
        return f"{DEVICE_NAME}-{device_id}"

    @classmethod
    def get_device_total_memory(cls, device_id: int = 0) -> int:
        # The device's capacity, OPENREG_DEVICE_MEMORY (docs/memory.md), without initializing it.
        return torch.openreg.get_device_properties(device_id).total_memory

    @classmethod
    def get_current_memory_usage(cls, device: torch.types.Device | None = None) -> float:
        torch.openreg.empty_cache()
        torch.openreg.reset_peak_memory_stats(device)
        return torch.openreg.max_memory_allocated(device)

    @classmethod
    def set_device(cls, device: torch.device) -> None:
        torch.openreg.set_device(device)

    @classmethod
    def manual_seed_all(cls, seed: int) -> None:
        torch.openreg.manual_seed_all(seed)

    @classmethod
    def check_if_supports_dtype(cls, dtype: torch.dtype) -> None:
        if dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"openreg runs vLLM models in float32, bfloat16 or float16, not {dtype}")

    @classmethod
    def is_pin_memory_available(cls) -> bool:
        return True  # openreg's host allocator pins (docs/memory.md); vLLM stages inputs there

    # -- what runs the model --------------------------------------------------------------------
    @classmethod
    def get_attn_backend_cls(
        cls,
        selected_backend: AttentionBackendEnum | None,
        attn_selector_config: AttentionSelectorConfig,
        num_heads: int | None = None,
    ) -> str:
        from .attention import OpenRegAttentionBackend

        config = attn_selector_config
        unsupported = {
            "multi-head latent attention (MLA)": config.use_mla,
            "sparse attention": config.use_sparse,
            "attention sinks": config.has_sink,
            "sliding windows": config.has_sliding_window,
        }
        for feature, asked in unsupported.items():
            if asked:
                raise NotImplementedError(f"openreg's attention backend does not support {feature}")
        if not OpenRegAttentionBackend.supports_attn_type(config.attn_type):
            raise NotImplementedError(f"openreg's attention backend does not support {config.attn_type} attention")
        if selected_backend is not None:
            logger.info("%s: attention backend %s is not available; using OPENREG_ATTN", DEVICE_NAME, selected_backend)
        return f"{OpenRegAttentionBackend.__module__}.{OpenRegAttentionBackend.__qualname__}"

    @classmethod
    def import_kernels(cls) -> None:
        # vLLM's compiled operators (vllm._C) are CUDA kernels: nothing on openreg's path calls
        # them, and custom operators take their PyTorch form (forward_oot is forward_native).
        return

    @classmethod
    def register_triton_kernel_overrides(cls) -> None:
        from vllm.triton_utils.dispatcher import register_kernels

        from .kernels import OVERRIDES

        register_kernels(OVERRIDES)

    @classmethod
    def support_static_graph_mode(cls) -> bool:
        # Graphs on torch.accelerator.Graph (graphs.py); vLLM then keeps its cudagraph_mode.
        return True

    @classmethod
    def get_static_graph_wrapper_cls(cls) -> str:
        # Asked by vLLM's compile backend for the PIECEWISE pieces; the runner's FULL wrapper is
        # rewrapped with the same class (Note [vLLM's graph capture on openreg], worker.py).
        return "torch_openreg.vllm.graphs.OpenRegGraphWrapper"

    @classmethod
    def opaque_attention_op(cls) -> bool:
        # Attention as vLLM's custom operator (vllm::unified_attention_with_output), opaque to
        # Dynamo: the compiled model splits its graph there, and the attention metadata, built per
        # step on the host, is never traced into a compiled piece.
        return True

    @classmethod
    def get_pass_manager_cls(cls) -> str:
        return "torch_openreg.vllm.compile.OpenRegPassManager"

    @classmethod
    def get_device_communicator_cls(cls) -> str:
        # vLLM's base communicator runs torch.distributed collectives on the group's backend,
        # which is occl for openreg tensors: nothing device-specific is left to write.
        return "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase"

    # [marker: vllm-config]
    @classmethod
    def check_and_update_config(cls, vllm_config: VllmConfig) -> None:
        """Worker class, model runner, scheduling, compilation and graph choices for openreg; each
        feature turned off is logged with its reason."""
        from vllm.config import CompilationMode, CUDAGraphMode

        _spawn_if_initialized()
        parallel = vllm_config.parallel_config
        if parallel.worker_cls == "auto":
            parallel.worker_cls = "torch_openreg.vllm.worker.OpenRegWorker"
        # Tensor and pipeline parallelism: one worker per rank, each on openreg:<local rank>.
        devices = torch.openreg.device_count()
        if parallel.world_size > devices:
            raise ValueError(
                f"{DEVICE_NAME}: tensor_parallel_size {parallel.tensor_parallel_size} x "
                f"pipeline_parallel_size {parallel.pipeline_parallel_size} needs a device per rank, "
                f"and there are {devices} (OPENREG_DEVICE_COUNT)"
            )
        if parallel.data_parallel_size > 1:
            raise NotImplementedError(
                f"{DEVICE_NAME}: data parallelism needs a variable that hides devices from each engine, "
                "and the openreg runtime has none"
            )

        scheduler = vllm_config.scheduler_config
        if scheduler.async_scheduling:
            _disable(
                "async scheduling disabled: vLLM's model runner overlaps steps with torch.cuda "
                "streams and events by name (gpu_model_runner.py), which do not exist here"
            )
            scheduler.async_scheduling = False

        compilation = vllm_config.compilation_config
        if parallel.world_size > 1 and compilation.cudagraph_mode != CUDAGraphMode.NONE:
            _disable(
                "graphs disabled with more than one rank: capturing occl's collectives in a graph "
                "is not tried yet (see docs/vllm.md, Features)"
            )
            compilation.cudagraph_mode = CUDAGraphMode.NONE
            compilation.cudagraph_capture_sizes = []
            compilation.max_cudagraph_capture_size = 0
        if compilation.compile_sizes is None:
            compilation.compile_sizes = []
        if compilation.mode not in (CompilationMode.NONE, CompilationMode.VLLM_COMPILE):
            _disable(
                f"torch.compile mode {compilation.mode.name} replaced by VLLM_COMPILE, the mode "
                "tested on openreg (Inductor compiles the pieces between attention calls)"
            )
            compilation.mode = CompilationMode.VLLM_COMPILE
        if compilation.mode == CompilationMode.VLLM_COMPILE:
            compilation.backend = "inductor"  # openreg's Inductor registration (docs/compile.md)

        # vLLM's JIT warm-up compiles the Triton kernels its runner will launch; on openreg those
        # are replaced by PyTorch operators (kernels.py), which have nothing to compile.
        vllm_config.kernel_config.enable_jit_warmup = False

        if vllm_config.use_v2_model_runner:
            raise NotImplementedError(
                "openreg runs vLLM's v1 model runner; the v2 runner's Triton kernels are CUDA's "
                "(unset VLLM_USE_V2_MODEL_RUNNER)"
            )
