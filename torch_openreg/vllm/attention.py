"""`OpenRegAttentionBackend`: attention over vLLM's paged KV cache, written with PyTorch operators.

vLLM gives each attention layer a view of the KV cache `[num_blocks, num_kv_heads, block_size,
2 * head_size]` (its logical `[B, H, N, C]`, vllm/v1/kv_cache_layout.py; C holds a token's key then
its value) and, per step, a batch of requests whose new tokens are concatenated: some requests in
prefill (many new tokens), others in decode (one), each with its own context length and its own
row of the block table. The backend does two things per layer:

- `do_kv_cache_update` writes the step's keys and values to their slots (`slot_mapping`, one slot
  `block * block_size + offset` per token, -1 for padding);
- `forward` gathers each request's whole context back from its blocks and runs one
  `scaled_dot_product_attention` for the batch, with grouped-query heads (`enable_gqa`) and a mask
  that is causal at each request's own offset (a new token at position p sees positions <= p).

See Note [One attention call per step] for how the batch becomes one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import (
    AttentionBackend,
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
    query_index: torch.Tensor  # [requests, longest query]: row of `query` for each padded place
    context_blocks: torch.Tensor  # [requests, longest context]: cache block of each position
    context_offsets: torch.Tensor  # [requests, longest context]: offset in that block
    mask: torch.Tensor  # [requests, 1, longest query, longest context], True where attention goes
    output_index: torch.Tensor  # [num_actual_tokens]: padded place of each real token


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
class OpenRegAttentionMetadataBuilder(AttentionMetadataBuilder[OpenRegAttentionMetadata]):
    def __init__(self, kv_cache_spec, layer_names, vllm_config, device: torch.device) -> None:
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.block_size = kv_cache_spec.block_size

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata: CommonAttentionMetadata,
        fast_build: bool = False,
    ) -> OpenRegAttentionMetadata:
        common = common_attn_metadata
        num_requests = common.num_reqs
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
            num_actual_tokens=common.num_actual_tokens,
            query_index=to_device(query_index),
            context_blocks=torch.gather(block_table, 1, position_on_device // self.block_size),
            context_offsets=position_on_device % self.block_size,
            mask=to_device(mask[:, None]),
            output_index=to_device(output_index),
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
        # Padding tokens carry slot -1 at the end of the mapping (gpu_model_runner.py fills them);
        # only the real ones are written.
        real = slot_mapping >= 0
        slots = slot_mapping[real]
        blocks, offsets = slots // block_size, slots % block_size
        key_cache, value_cache = self._split(kv_cache)
        # Advanced indices on dims 0 and 2 around a slice: the indexed place is [tokens, heads, D].
        key_cache[blocks, :, offsets] = key[: slot_mapping.shape[0]][real]
        value_cache[blocks, :, offsets] = value[: slot_mapping.shape[0]][real]

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
