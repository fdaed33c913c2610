"""`OpenRegAttentionBackend`: attention over vLLM's paged KV cache, written with PyTorch operators.

vLLM gives each attention layer a view of the KV cache `[num_blocks, num_kv_heads, block_size,
2 * head_size]` (its logical `[B, H, N, C]`, vllm/v1/kv_cache_layout.py; C holds a token's key then
its value) and, per step, a batch of requests whose new tokens are concatenated: some requests in
prefill (many new tokens), others in decode (one), each with its own context length and its own
row of the block table. The backend does two things per layer:

- `do_kv_cache_update` writes the step's keys and values to their slots (`slot_mapping`, one slot
  `block * block_size + offset` per token, -1 for padding, which goes to vLLM's null block);
- `forward` gathers each request's whole context back from its blocks and runs one
  `scaled_dot_product_attention` for the batch, with grouped-query heads (`enable_gqa`) and a mask
  that is causal at each request's own offset (a new token at position p sees positions <= p).

See Note [One attention call per step] for how the batch becomes one call, and Note [Decode
metadata in fixed buffers] for the decode steps a graph replays.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
    AttentionCGSupport,
    AttentionImpl,
    AttentionLayer,
    AttentionMetadata,
    AttentionMetadataBuilder,
    AttentionType,
    CommonAttentionMetadata,
)
from vllm.v1.attention.backends.registry import register_backend


# [marker: vllm-attention-backend]
# vLLM's attention layer looks its backend up by name in AttentionBackendEnum; the registration
# adds the name there (once per process: this module's import).
@register_backend("OPENREG_ATTN")
class OpenRegAttentionBackend(AttentionBackend):
    # The cache write is its own step (vLLM calls do_kv_cache_update before forward), as in the
    # CPU and FlashAttention backends, so that torch.compile can see the ordering between them.
    forward_includes_kv_cache_update: bool = False

    supported_dtypes: ClassVar[list[torch.dtype]] = [torch.float32, torch.bfloat16, torch.float16]
    supported_kv_cache_dtypes: ClassVar[list[str]] = ["auto", "float32", "bfloat16", "float16"]

    @staticmethod
    def get_name() -> str:
        return "OPENREG_ATTN"

    @staticmethod
    def get_impl_cls() -> type[OpenRegAttentionImpl]:
        return OpenRegAttentionImpl

    @staticmethod
    def get_builder_cls() -> type[OpenRegAttentionMetadataBuilder]:
        return OpenRegAttentionMetadataBuilder

    @classmethod
    def supports_attn_type(cls, attn_type: str) -> bool:
        return attn_type == AttentionType.DECODER


@dataclass
class OpenRegAttentionMetadata(AttentionMetadata):
    """What every layer of one step shares: the indices that turn the step's flat tokens and the
    paged cache into a padded batch, and back (Note [One attention call per step])."""

    num_actual_tokens: int
    # In a batch of one-token decodes in fixed buffers (Note [Decode metadata in fixed buffers]),
    # context_blocks is [requests, blocks per request] and the three index tensors are None.
    query_index: torch.Tensor | None  # [requests, longest query]: row of `query` for each padded place
    context_blocks: torch.Tensor  # [requests, longest context]: cache block of each position
    context_offsets: torch.Tensor | None  # [requests, longest context]: offset in that block
    mask: torch.Tensor  # [requests, 1, longest query, longest context], True where attention goes
    output_index: torch.Tensor | None  # [num_actual_tokens]: padded place of each real token


# Note [One attention call per step]
# A step mixes requests with different numbers of new tokens (Lq) and different context lengths
# (S). Rather than one attention call per request and layer, the metadata builder makes, once per
# step, index tensors that pad the batch to [requests, max Lq] queries and [requests, max S] keys:
# padded places repeat the request's last real token or position (so every index is valid and no
# uninitialized cache slot is read), and the mask hides them. New token i of a request sits at
# position S - Lq + i and sees positions j <= S - Lq + i, which is causal attention aligned at the
# bottom right; padded query rows see the same as the last real row (never an empty row, which
# would give NaN) and are dropped by `output_index`. Each layer is then one gather from the cache,
# one scaled_dot_product_attention and one gather back.
#
# Note [Decode metadata in fixed buffers]
# A replayed graph reads the addresses it was captured with, and its shapes are those of the
# capture, so the metadata of a step it replays cannot be tensors made per step with per-step
# shapes. vLLM replays FULL graphs for uniform decode batches only (every request one new token,
# the batch padded with empty requests to a capture size; `_cudagraph_support` below), and for
# those the builder writes into buffers it allocated once, of fixed width: every request reads
# every block its block-table row can hold (max_model_len positions, rounded up to blocks), whole
# blocks at a time (one gather of contiguous rows per layer instead of one per position). Block j
# of request i is min(j, (S_i - 1) // block_size) of its row, so only the request's own blocks are
# read (vLLM zeroes a block before its first write: never uninitialized memory, which could hold a
# NaN that a masked position would still multiply into the result); position p is masked unless
# p <= S_i - 1. These are computed on the device from vLLM's own persistent tensors (seq_lens, the
# block table) and copied into the buffers by a few operators, with no copy to the host. A padded
# request (S = 0, its row filled with vLLM's null block 0) sees position 0 of the null block, so
# its row is finite, and its output is never read. The same path serves decode batches run without
# a graph while graphs are on, so a replayed step and an eager one compute the same. Its price is
# attention over max_model_len positions at every decode step.
class OpenRegAttentionMetadataBuilder(AttentionMetadataBuilder[OpenRegAttentionMetadata]):
    # FULL graphs for batches of one-token decodes (vLLM pads them to its capture sizes).
    _cudagraph_support: ClassVar[AttentionCGSupport] = AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size
        compilation = vllm_config.compilation_config
        self.fixed_decode = compilation.cudagraph_mode.has_full_cudagraphs()
        if self.fixed_decode:
            requests = max(vllm_config.scheduler_config.max_num_seqs, compilation.max_cudagraph_capture_size or 0)
            blocks = -(-vllm_config.model_config.max_model_len // self.block_size)
            self.block_numbers = torch.arange(blocks, dtype=torch.int64, device=device)
            self.positions = torch.arange(blocks * self.block_size, dtype=torch.int64, device=device)
            self.decode_blocks = torch.zeros(requests, blocks, dtype=torch.int64, device=device)
            self.decode_mask = torch.zeros(requests, 1, 1, blocks * self.block_size, dtype=torch.bool, device=device)

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> OpenRegAttentionMetadata:
        common = common_attn_metadata
        num_requests = common.num_reqs
        if (
            self.fixed_decode
            and common.max_query_len == 1
            and num_requests == common.num_actual_tokens
            and num_requests <= self.decode_blocks.shape[0]
        ):
            return self._build_decode(common)
        starts = common.query_start_loc_cpu[: num_requests + 1].numpy().astype(np.int64)
        # The context lengths on the host: one copy per step, shared by every layer.
        context = common.seq_lens[:num_requests].cpu().numpy().astype(np.int64)
        query = starts[1:] - starts[:-1]
        longest_query, longest_context = int(query.max()), int(context.max())

        row = np.arange(longest_query)[None, :]
        query_index = starts[:-1, None] + np.minimum(row, query[:, None] - 1)
        column = np.arange(longest_context)[None, :]
        position = np.minimum(column, context[:, None] - 1)
        # Last position each padded query row may see (rows past Lq repeat the last real row).
        last_seen = context[:, None] - query[:, None] + np.minimum(row, query[:, None] - 1)
        mask = column[:, None, :] <= last_seen[:, :, None]
        output_index = np.concatenate([r * longest_query + np.arange(n) for r, n in enumerate(query.tolist())])

        def to_device(array: np.ndarray) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(array)).to(self.device, non_blocking=True)

        position_on_device = to_device(position)
        block_table = common.block_table_tensor[:num_requests].to(torch.int64)
        return OpenRegAttentionMetadata(
            # The real tokens: vLLM pads a step's tokens (not its requests) to a graph size for
            # PIECEWISE graphs, and the padding's output rows are never read.
            num_actual_tokens=int(starts[-1]),
            query_index=to_device(query_index),
            context_blocks=torch.gather(block_table, 1, position_on_device // self.block_size),
            context_offsets=position_on_device % self.block_size,
            mask=to_device(mask[:, None]),
            output_index=to_device(output_index),
        )

    # [marker: vllm-decode-metadata]
    def _build_decode(self, common: CommonAttentionMetadata) -> OpenRegAttentionMetadata:
        """Note [Decode metadata in fixed buffers]: a batch of one-token decodes, each request
        reading the whole width of its block-table row, in the builder's persistent buffers."""
        n = common.num_reqs
        last = (common.seq_lens[:n].to(torch.int64) - 1).clamp_(min=0)  # the new token's position
        block = torch.minimum(self.block_numbers[None, :], (last // self.block_size)[:, None])
        width = self.block_numbers.shape[0]
        block_table = common.block_table_tensor[:n, :width].to(torch.int64)
        self.decode_blocks[:n].copy_(torch.gather(block_table, 1, block))
        self.decode_mask[:n, 0, 0].copy_(self.positions[None, :] <= last[:, None])
        return OpenRegAttentionMetadata(
            num_actual_tokens=n,
            query_index=None,
            context_blocks=self.decode_blocks[:n],
            context_offsets=None,
            mask=self.decode_mask[:n],
            output_index=None,
        )


class OpenRegAttentionImpl(AttentionImpl[OpenRegAttentionMetadata]):
    def __init__(
        self,
        num_heads: int,
        head_size: int,
        scale: float,
        num_kv_heads: int | None = None,
        alibi_slopes: list[float] | None = None,
        sliding_window: int | None = None,
        kv_cache_dtype: str = "auto",
        logits_soft_cap: float | None = None,
        attn_type: str = AttentionType.DECODER,
        kv_sharing_target_layer_name: str | None = None,
        sinks: torch.Tensor | None = None,
    ) -> None:
        unsupported = {
            "ALiBi": alibi_slopes is not None,
            "sliding windows": sliding_window is not None,
            "logit soft capping": bool(logits_soft_cap),
            "attention sinks": sinks is not None,
            f"{attn_type} attention": attn_type != AttentionType.DECODER,
        }
        for feature, asked in unsupported.items():
            if asked:
                raise NotImplementedError(f"openreg's attention backend does not support {feature}")
        self.num_heads = num_heads
        self.head_size = head_size
        self.scale = float(scale)
        self.num_kv_heads = num_kv_heads or num_heads
        self.kv_cache_dtype = kv_cache_dtype
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def _split(self, kv_cache: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value halves of the cache's last dimension."""
        assert kv_cache.shape[-1] == 2 * self.head_size, f"unexpected KV cache view {tuple(kv_cache.shape)}"
        return kv_cache[..., : self.head_size], kv_cache[..., self.head_size :]

    # [marker: vllm-kv-cache-update]
    def do_kv_cache_update(
        self,
        layer: torch.nn.Module,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        slot_mapping: torch.Tensor,
    ) -> None:
        block_size = kv_cache.shape[2]
        # Padding tokens carry slot -1 at the end of the mapping (gpu_model_runner.py fills them).
        # They are written to slot 0, in vLLM's null block (block 0, which the block pool never
        # gives a request and which only padding reads): selecting the real tokens with a mask
        # would make the output's shape depend on the data, a synchronization that a graph cannot
        # capture and that eager steps would pay per layer.
        slots = slot_mapping.clamp(min=0)
        blocks, offsets = slots // block_size, slots % block_size
        key_cache, value_cache = self._split(kv_cache)
        # Advanced indices on dims 0 and 2 around a slice: the indexed place is [tokens, heads, D].
        key_cache[blocks, :, offsets] = key[: slot_mapping.shape[0]]
        value_cache[blocks, :, offsets] = value[: slot_mapping.shape[0]]

    # [marker: vllm-attention-forward]
    def forward(
        self,
        layer: AttentionLayer,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        kv_cache: torch.Tensor,
        attn_metadata: OpenRegAttentionMetadata | None,
        output: torch.Tensor,
        output_scale: torch.Tensor | None = None,
        output_block_scale: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError("openreg's attention backend does not fuse output quantization")
        if attn_metadata is None:  # vLLM's profiling and warm-up runs, before the cache exists
            return output
        meta = attn_metadata
        if meta.context_offsets is None:
            return self._forward_decode(query, kv_cache, meta, output)
        key_cache, value_cache = self._split(kv_cache)
        # [requests, longest context, kv heads, D] -> [requests, kv heads, longest context, D]
        keys = key_cache[meta.context_blocks, :, meta.context_offsets].transpose(1, 2)
        values = value_cache[meta.context_blocks, :, meta.context_offsets].transpose(1, 2)
        queries = query[meta.query_index].transpose(1, 2)  # [requests, heads, longest query, D]
        attended = F.scaled_dot_product_attention(
            queries,
            keys,
            values,
            attn_mask=meta.mask,
            scale=self.scale,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        flat = attended.transpose(1, 2).reshape(-1, self.num_heads, self.head_size)
        output[: meta.num_actual_tokens] = flat[meta.output_index]
        return output

    def _forward_decode(
        self, query: torch.Tensor, kv_cache: torch.Tensor, meta: OpenRegAttentionMetadata, output: torch.Tensor
    ) -> torch.Tensor:
        """One-token decodes in fixed buffers (Note [Decode metadata in fixed buffers]): request i's
        query is row i, its context whole blocks of the cache."""
        n = meta.context_blocks.shape[0]
        # [n, blocks, kv heads, block size, 2D] -> [n, kv heads, blocks * block size, 2D]
        context = kv_cache[meta.context_blocks].transpose(1, 2).reshape(n, self.num_kv_heads, -1, 2 * self.head_size)
        attended = F.scaled_dot_product_attention(
            query[:n].unsqueeze(2),  # [n, heads, 1, D]
            context[..., : self.head_size],
            context[..., self.head_size :],
            attn_mask=meta.mask,
            scale=self.scale,
            enable_gqa=self.num_kv_heads != self.num_heads,
        )
        output[:n] = attended.reshape(n, self.num_heads, self.head_size)
        return output
