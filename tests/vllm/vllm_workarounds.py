"""The vLLM 0.33.0 lines torch_openreg.vllm works around (docs/vllm.md, "What vLLM makes us work
around"), each checked to still be there: when one of these tests fails, vLLM has changed, and the
workaround it names can go (or must change)."""

from __future__ import annotations

import inspect
import os

import pytest
import torch
import vllm.v1.worker.gpu_worker as gpu_worker
from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass
from vllm.model_executor.warmup import kernel_warmup
from vllm.triton_utils import HAS_TRITON


def test_vllms_warm_up_still_imports_a_cuda_only_model_module():
    """OpenRegWorker.compile_or_warm_up_model (Note [vLLM's warm-up on openreg]) exists because
    kernel_warmup imports a Step5 module whose import needs Triton's CUDA backend."""
    assert "step5_dsa_warmup(worker)" in inspect.getsource(kernel_warmup.kernel_warmup)
    assert "kernel_warmup(self)" in inspect.getsource(gpu_worker.Worker._compile_or_warm_up_model)
    assert not HAS_TRITON, "Triton has an active driver here: the import below may succeed"
    with pytest.raises(AttributeError, match="extra"):
        import vllm.models.step5.nvidia.sparse_attention  # noqa: F401


def test_vllms_fix_functionalization_still_names_an_operator_of_its_cuda_extension():
    """OpenRegPassManager (torch_openreg/vllm/compile.py) exists because this pass reads
    torch.ops._C.rotary_embedding, which only vLLM's CUDA extension registers."""
    assert "torch.ops._C.rotary_embedding" in inspect.getsource(FixFunctionalizationPass.__call__)
    assert not hasattr(torch.ops._C, "rotary_embedding")


def test_vllm_still_picks_the_triton_runner_unless_told_otherwise():
    """Note [vLLM's model runner on openreg]: the platform sets VLLM_USE_V2_MODEL_RUNNER=0 by
    default, because vLLM picks its Triton model runner when nothing says otherwise."""
    from vllm.config import VllmConfig

    source = inspect.getsource(VllmConfig.use_v2_model_runner.fget)
    assert "VLLM_USE_V2_MODEL_RUNNER" in source and source.rstrip().endswith("return True")
    assert os.environ.get("VLLM_USE_V2_MODEL_RUNNER") == "0"  # set by importing the platform (vllm.platforms)


def test_vllms_block_zeroing_is_still_a_triton_kernel_on_raw_addresses():
    """OpenRegModelRunner overrides _init_kv_zero_meta and _zero_block_ids because vLLM zeroes new
    cache blocks with a Triton kernel over raw addresses (KVBlockZeroer), which the by-name kernel
    registry cannot replace with PyTorch operators."""
    from vllm.v1.worker.utils import KVBlockZeroer

    source = inspect.getsource(KVBlockZeroer.zero_block_ids)
    assert "_zero_kv_blocks_kernel[grid]" in source


def test_vllms_graph_wrapper_still_captures_with_torch_cuda_and_its_cuda_extension():
    """OpenRegGraphWrapper (torch_openreg/vllm/graphs.py) overrides CUDAGraphWrapper.__call__
    because vLLM's captures with torch.cuda.CUDAGraph and torch.cuda.graph by name and hands its
    output back through weak_ref_tensor, an operator of vLLM's CUDA extension."""
    from vllm.compilation.cuda_graph import CUDAGraphWrapper
    from vllm.utils import torch_utils

    source = inspect.getsource(CUDAGraphWrapper.__call__)
    assert "torch.cuda.CUDAGraph()" in source and "with torch.cuda.graph(" in source
    assert "weak_ref_tensors(output)" in source
    assert "torch.ops._C.weak_ref_tensor(tensor)" in inspect.getsource(torch_utils.weak_ref_tensor)
    assert not hasattr(torch.ops._C, "weak_ref_tensor")


def test_vllms_runner_still_wraps_full_graphs_with_the_cuda_wrapper_by_name():
    """OpenRegModelRunner.load_model rewraps the model (Note [vLLM's graph capture on openreg]):
    the runner asks the platform for its wrapper class only for PIECEWISE pieces, and wraps the
    whole model for FULL graphs in CUDAGraphWrapper by name."""
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    source = inspect.getsource(GPUModelRunner.load_model)
    assert "self.model = CUDAGraphWrapper(" in source
    assert "runtime_mode=CUDAGraphMode.FULL" in source
    assert "get_static_graph_wrapper_cls" not in source


def test_vllms_graph_capture_still_makes_a_cuda_stream():
    """OpenRegModelRunner.capture_model captures on an openreg stream of its own because vLLM's
    capture_model enters graph_capture (distributed/parallel_state.py), which makes a
    torch.cuda.Stream, and whose group contexts assert a CUDA or XPU communicator."""
    from vllm.distributed import parallel_state
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    assert "graph_capture(device=self.device)" in inspect.getsource(GPUModelRunner.capture_model)
    assert "GraphCaptureContext(torch.cuda.Stream(device=device))" in inspect.getsource(parallel_state.graph_capture)
    group = inspect.getsource(parallel_state.GroupCoordinator.graph_capture)
    assert "(CudaCommunicator, XpuCommunicator)" in group


def test_vllm_still_profiles_graph_memory_for_cuda_rocm_and_xpu_only():
    """The KV cache is sized without a graph memory estimate on openreg (docs/vllm.md, "Graphs"):
    the worker profiles graphs only when the platform is CUDA-alike or XPU."""
    source = inspect.getsource(gpu_worker.Worker.determine_available_memory)
    assert "(current_platform.is_cuda_alike() or current_platform.is_xpu())" in source
    assert "self.model_runner.profile_cudagraph_memory()" in source
