"""PyTorch forms of the Triton kernels vLLM's v1 model runner launches on a plain decoder's path.

Triton compiles for CUDA, ROCm and XPU, not for openreg. vLLM lets a platform replace a core Triton
kernel by name (`vllm.triton_utils.dispatcher.register_kernels`, called from
`Platform.register_triton_kernel_overrides` when a worker starts); the replacement receives the
kernel's launch arguments. Each function here does what its kernel does, with operators that run
on openreg, asynchronously on the current stream.
"""

from __future__ import annotations

import torch


# [marker: vllm-slot-mapping]
def compute_slot_mapping(
    num_tokens: int,
    max_num_tokens: int,
    query_start_loc: torch.Tensor,
    positions: torch.Tensor,
    block_table: torch.Tensor,
    block_table_stride: int,
    slot_mapping: torch.Tensor,
    KV_CACHE_BLOCK_SIZE: int,  # the kernel's argument names, in its order
    TOTAL_CP_WORLD_SIZE: int,
    TOTAL_CP_RANK: int,
    CP_KV_CACHE_INTERLEAVE_SIZE: int,
    PAD_ID: int,
    BLOCK_SIZE: int,
) -> None:
    """`ComputeSlotMappingKernel.kernel` (vllm/v1/worker/block_table.py): the cache slot of each
    new token, `block_table[request, position // block_size] * block_size + position %
    block_size`, and PAD_ID after the last real token."""
    if TOTAL_CP_WORLD_SIZE != 1:
        raise NotImplementedError("openreg does not support context parallelism")
    tokens = torch.arange(num_tokens, device=positions.device)
    # A token's request: how many requests end at or before it.
    request = torch.searchsorted(query_start_loc[1:].to(torch.int64), tokens, right=True)
    position = positions[:num_tokens]
    block_index = request * block_table_stride + position // KV_CACHE_BLOCK_SIZE
    blocks = block_table.reshape(-1)[block_index].to(torch.int64)
    slot_mapping[:num_tokens] = blocks * KV_CACHE_BLOCK_SIZE + position % KV_CACHE_BLOCK_SIZE
    slot_mapping[num_tokens:max_num_tokens] = PAD_ID


# The kernels replaced, by the name vLLM's dispatcher resolves.
OVERRIDES = {
    "vllm.v1.worker.block_table.ComputeSlotMappingKernel.kernel": compute_slot_mapping,
}
