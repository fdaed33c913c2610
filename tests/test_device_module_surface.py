"""torch.openreg against torch.cuda's public surface: every name in torch.cuda.__all__ is either in
torch.openreg, or absent for a reason written here. Libraries reach the device module through
torch.get_device_module("openreg") or getattr(torch, device.type) and call these names; the
second half checks the names added for them against the CPU or the device's own figures."""

import warnings

import pytest
import torch

openreg = torch.openreg

# torch.cuda names that torch.openreg has, with the same meaning.
PRESENT = {
    # devices and streams
    "current_device", "device", "device_count", "device_of", "get_device_capability", "get_device_name",
    "get_device_properties", "init", "is_available", "is_initialized", "set_device", "synchronize",
    "can_device_access_peer", "is_bf16_supported", "is_tf32_supported", "has_half",
    "Stream", "StreamContext", "Event", "current_stream", "default_stream", "set_stream", "stream", "streams",
    # memory
    "memory", "empty_cache", "mem_get_info", "memory_allocated", "max_memory_allocated", "memory_reserved",
    "max_memory_reserved", "memory_cached", "max_memory_cached", "memory_stats", "memory_stats_as_nested_dict",
    "memory_summary", "memory_snapshot", "reset_accumulated_memory_stats", "reset_peak_memory_stats",
    "reset_max_memory_allocated", "reset_max_memory_cached", "device_memory_used", "get_allocator_backend",
    "ipc_collect", "MemPool", "use_mem_pool", "set_per_process_memory_fraction", "get_per_process_memory_fraction",
    # random numbers
    "random", "default_generators", "get_rng_state", "get_rng_state_all", "set_rng_state", "set_rng_state_all",
    "manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed",
    # graphs, mixed precision, storages
    "graphs", "graph", "graph_pool_handle", "is_current_stream_capturing", "amp",
    "BFloat16Storage", "BoolStorage", "ByteStorage", "CharStorage", "ComplexDoubleStorage", "ComplexFloatStorage",
    "DoubleStorage", "FloatStorage", "HalfStorage", "IntStorage", "LongStorage", "ShortStorage",
}

_CUDA_ONLY = "CUDA-only: "
_NOT_YET = "not implemented: "
# torch.cuda names that torch.openreg does not have, and why.
ABSENT = {
    # the CUDA toolkit, its libraries and NVIDIA's tools
    "cudart": _CUDA_ONLY + "the CUDA runtime library's bindings",
    "cudaStatus": _CUDA_ONLY + "cudaError_t codes",
    "CudaError": _CUDA_ONLY + "the exception of a cudaError_t; openreg raises torch's own (docs/errors.md)",
    "DeferredCudaCallError": _CUDA_ONLY + "CUDA's lazy-initialization failure",
    "check_error": _CUDA_ONLY + "turns a cudaError_t into CudaError",
    "nccl": _CUDA_ONLY + "NCCL's bindings; openreg's collectives are the occl c10d backend",
    "nvtx": _CUDA_ONLY + "NVIDIA's range annotations; torch.profiler records openreg (docs/profiling.md)",
    "profiler": _CUDA_ONLY + "starts and stops NVIDIA's external profiler",
    "jiterator": _CUDA_ONLY + "compiles CUDA C++ elementwise kernels at run time",
    "tunable": _CUDA_ONLY + "TunableOp's choice among cuBLAS/hipBLASLt kernels",
    "sparse": _CUDA_ONLY + "cuSPARSE settings",
    "current_blas_handle": _CUDA_ONLY + "the cuBLAS handle",
    "current_solver_handle": _CUDA_ONLY + "the cuSOLVER handle",
    "get_arch_list": _CUDA_ONLY + "the SM architectures the CUDA build was compiled for",
    "get_gencode_flags": _CUDA_ONLY + "nvcc's -gencode flags",
    "has_magma": _CUDA_ONLY + "whether the build links MAGMA",
    "GreenContext": _CUDA_ONLY + "partitions of an NVIDIA GPU's multiprocessors",
    "CUDAPluggableAllocator": _CUDA_ONLY + "loads a cudaMalloc replacement from a shared library",
    "change_current_allocator": _CUDA_ONLY + "installs a CUDAPluggableAllocator",
    # NVML / amdsmi: figures of a physical board
    "utilization": _CUDA_ONLY + "NVML's percentage of time a kernel ran",
    "memory_usage": _CUDA_ONLY + "NVML's percentage of time memory was read or written",
    "temperature": _CUDA_ONLY + "NVML's board temperature",
    "power_draw": _CUDA_ONLY + "NVML's power draw",
    "clock_rate": _CUDA_ONLY + "NVML's SM clock",
    "list_gpu_processes": _CUDA_ONLY + "NVML's list of processes on the board",
    # legacy typed tensors: torch makes these classes for CUDA only (torch/csrc/tensor/python_tensor.cpp)
    **dict.fromkeys(
        (
            "BFloat16Tensor", "BoolTensor", "ByteTensor", "CharTensor", "DoubleTensor", "FloatTensor",
            "HalfTensor", "IntTensor", "LongTensor", "ShortTensor",
        ),
        _CUDA_ONLY + "a legacy typed-tensor class; use torch.tensor(..., dtype=, device='openreg')",
    ),
    # CUDA graphs' debugging hooks (torch 2.14 and later)
    "graph_annotations": _CUDA_ONLY + "tags kernels of a CUDA graph for CUPTI traces",
    "export_dot": _CUDA_ONLY + "dumps a cudaGraph_t in DOT",
    "export_graph_data": _CUDA_ONLY + "pickles a cudaGraph_t's nodes",
    # what openreg could have and does not yet
    "CUDAGraph": _NOT_YET + "the class is torch.openreg.Graph (torch.accelerator.Graph), not under CUDA's name",
    "make_graphed_callables": _NOT_YET + "graphed forward and backward of a module",
    "caching_allocator_alloc": _NOT_YET + "raw allocations from the caching allocator",
    "caching_allocator_delete": _NOT_YET + "raw allocations from the caching allocator",
    "caching_allocator_enable": _NOT_YET + "switching the caching allocator off",
    "caching_allocator_disabled": _NOT_YET + "switching the caching allocator off",
    "host_memory_stats": _NOT_YET + "statistics of the pinned host allocator",
    "host_memory_stats_as_nested_dict": _NOT_YET + "statistics of the pinned host allocator",
    "reset_accumulated_host_memory_stats": _NOT_YET + "statistics of the pinned host allocator",
    "reset_peak_host_memory_stats": _NOT_YET + "statistics of the pinned host allocator",
    "ExternalStream": _NOT_YET + "wrapping a stream made outside torch",
    "get_stream_from_external": _NOT_YET + "wrapping a stream made outside torch",
    "set_sync_debug_mode": _NOT_YET + "warning on synchronizing operators (the ledger counts them)",
    "get_sync_debug_mode": _NOT_YET + "warning on synchronizing operators (the ledger counts them)",
}


def test_every_public_name_of_torch_cuda_is_present_or_absent_for_a_stated_reason():
    names = set(torch.cuda.__all__)
    unclassified = sorted(names - PRESENT - ABSENT.keys())
    assert not unclassified, f"classify these torch.cuda names: {unclassified}"
    assert not PRESENT & ABSENT.keys()
    missing = sorted(name for name in PRESENT & names if not hasattr(openreg, name))
    assert not missing, f"torch.openreg lacks {missing}"
    grown = sorted(name for name in ABSENT.keys() & names if hasattr(openreg, name))
    assert not grown, f"torch.openreg has {grown} now: move them to PRESENT"
    # Present names that are functions or classes are exported (modules and flags need not be).
    unexported = sorted(
        name for name in PRESENT & names if callable(getattr(openreg, name)) and name not in openreg.__all__
    )
    assert not unexported, f"not in torch.openreg.__all__: {unexported}"


def test_the_device_module_is_what_libraries_look_up():
    assert torch.get_device_module("openreg") is openreg
    assert torch.get_device_module(torch.device("openreg", 1)) is openreg
    assert getattr(torch, torch.accelerator.current_accelerator().type) is openreg


def test_bf16_and_half_are_supported_and_compute_as_on_the_cpu():
    assert openreg.is_bf16_supported() and openreg.is_bf16_supported(including_emulation=False)
    assert openreg.has_half is True
    assert openreg.is_tf32_supported() is False
    a, b = torch.randn(8, 16), torch.randn(16, 4)
    for dtype in (torch.bfloat16, torch.float16):
        expected = a.to(dtype) @ b.to(dtype)
        got = a.to("openreg", dtype) @ b.to("openreg", dtype)
        assert got.dtype == dtype and got.device.type == "openreg"
        assert torch.equal(got.cpu(), expected)


def test_every_pair_of_devices_can_access_each_other_and_bad_ids_raise():
    count = openreg.device_count()
    for device in range(count):
        for peer in range(count):
            assert openreg.can_device_access_peer(device, peer)
    x = torch.arange(6.0)
    assert torch.equal(x.to("openreg:0").to("openreg:1").cpu(), x)
    with pytest.raises(AssertionError, match="invalid peer id"):
        openreg.can_device_access_peer(0, count)
    with pytest.raises(AssertionError, match="invalid device id"):
        openreg.can_device_access_peer(-1, 0)


def test_default_generators_are_each_devices_generator():
    assert len(openreg.default_generators) == openreg.device_count()
    for index, generator in enumerate(openreg.default_generators):
        assert generator.device == torch.device("openreg", index)
        generator.manual_seed(1234 + index)
        drawn = torch.randn(5, device=f"openreg:{index}")
        assert torch.equal(drawn.cpu(), torch.randn(5, generator=torch.Generator().manual_seed(1234 + index)))


def test_nested_memory_statistics_flatten_to_memory_stats():
    x = torch.empty(1000, device="openreg:1")  # noqa: F841  (held: allocated memory is not zero)
    flat = openreg.memory_stats(1)
    nested = openreg.memory_stats_as_nested_dict(1)
    assert nested["allocated_bytes"]["all"]["current"] == flat["allocated_bytes.all.current"] > 0

    def flatten(node, prefix=""):
        for key, value in node.items():
            if isinstance(value, dict):
                yield from flatten(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    assert dict(flatten(nested)) == dict(flat)


def test_deprecated_cuda_memory_names_warn_and_answer_as_their_replacements():
    x = torch.empty(4096, device="openreg")  # noqa: F841
    with pytest.warns(FutureWarning):
        assert openreg.memory_cached() == openreg.memory_reserved()
    with pytest.warns(FutureWarning):
        assert openreg.max_memory_cached() == openreg.max_memory_reserved()
    torch.empty(1 << 20, device="openreg")
    peak = openreg.max_memory_allocated()
    assert peak > openreg.memory_allocated()
    with pytest.warns(FutureWarning):
        openreg.reset_max_memory_allocated()
    assert openreg.max_memory_allocated() == openreg.memory_allocated()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert openreg.get_allocator_backend() == "native"


def test_device_memory_used_is_capacity_minus_free():
    _, total = openreg.mem_get_info(0)
    assert total == openreg.get_device_properties(0).total_memory
    used = openreg.device_memory_used(0)
    assert used == total - openreg.mem_get_info(0)[0]
    assert used >= openreg.memory_reserved(0)
