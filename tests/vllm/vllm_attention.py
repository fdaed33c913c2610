"""openreg's vLLM attention backend alone (torch_openreg/vllm/attention.py, `make test-vllm`): one
step of a batch mixing a full prefill, a chunked prefill continuing a cached context, and decodes
of different context lengths, grouped-query heads, over a paged cache whose blocks are scattered;
against causal attention computed per request on the CPU from the unpaged keys and values. Also the
slot mapping that replaces vLLM's Triton kernel (torch_openreg/vllm/kernels.py)."""

from __future__ import annotations

import types

import numpy as np
import torch
import torch.nn.functional as F
from vllm.v1.attention.backend import CommonAttentionMetadata

from torch_openreg.vllm.attention import OpenRegAttentionImpl, OpenRegAttentionMetadataBuilder
from torch_openreg.vllm.kernels import compute_slot_mapping

HEADS, KV_HEADS, HEAD_SIZE, BLOCK, BLOCKS = 4, 2, 8, 4, 48
SCALE = HEAD_SIZE**-0.5
# (context length after the step, new tokens in the step): a prefill, a chunk of a longer
# prefill, decodes at several lengths (one at a block boundary), and a one-token prompt.
REQUESTS = [(7, 7), (13, 1), (1, 1), (20, 5), (16, 1), (9, 9), (17, 1)]


def _batch():
    generator = torch.Generator().manual_seed(0)
    keys = [torch.randn(s, KV_HEADS, HEAD_SIZE, generator=generator) for s, _ in REQUESTS]
    values = [torch.randn(s, KV_HEADS, HEAD_SIZE, generator=generator) for s, _ in REQUESTS]
    queries = torch.randn(sum(n for _, n in REQUESTS) + 3, HEADS, HEAD_SIZE, generator=generator)  # 3 padding rows
    # Each request's blocks, scattered over the cache (block 0 unused, as vLLM keeps it).
    order = (torch.randperm(BLOCKS - 1, generator=generator) + 1).tolist()
    table = torch.zeros(len(REQUESTS), 8, dtype=torch.int32)
    for row, (context, _) in enumerate(REQUESTS):
        count = -(-context // BLOCK)
        table[row, :count] = torch.tensor(order[:count])
        order = order[count:]
    return keys, values, queries, table


def _reference(keys, values, queries) -> torch.Tensor:
    rows, start = [], 0
    for (context, new), k, v in zip(REQUESTS, keys, values, strict=True):
        q = queries[start : start + new].transpose(0, 1)[None]
        mask = torch.ones(new, context, dtype=torch.bool).tril(context - new)
        out = F.scaled_dot_product_attention(
            q, k.transpose(0, 1)[None], v.transpose(0, 1)[None], attn_mask=mask, scale=SCALE, enable_gqa=True
        )
        rows.append(out[0].transpose(0, 1))
        start += new
    return torch.cat(rows)


def test_one_step_of_mixed_prefill_and_decode_equals_per_request_attention_on_cpu():
    keys, values, queries, table = _batch()
    device = torch.device("openreg", 0)
    new_tokens = sum(n for _, n in REQUESTS)
    starts = torch.tensor(np.concatenate([[0], np.cumsum([n for _, n in REQUESTS])]), dtype=torch.int32)
    positions = torch.cat([torch.arange(c - n, c) for c, n in REQUESTS])

    # The slot of every new token (vLLM's kernel, replaced), then 3 padding slots of -1.
    slots = torch.full((new_tokens + 3,), 12345, dtype=torch.int64, device=device)
    compute_slot_mapping(new_tokens, new_tokens + 3, starts.to(device), positions.to(device), table.to(device),
                         table.stride(0), slots, BLOCK, 1, 0, 1, -1, 1024)  # fmt: skip
    request_of = torch.repeat_interleave(torch.arange(len(REQUESTS)), torch.tensor([n for _, n in REQUESTS]))
    expected_slots = table[request_of, positions // BLOCK].long() * BLOCK + positions % BLOCK
    assert slots.cpu().tolist() == [*expected_slots.tolist(), -1, -1, -1]

    # The cache holds each request's earlier positions; the step writes the new ones.
    cache = torch.zeros(BLOCKS, KV_HEADS, BLOCK, 2 * HEAD_SIZE)
    for row, (context, new) in enumerate(REQUESTS):
        for p in range(context - new):
            block, offset = int(table[row, p // BLOCK]), p % BLOCK
            cache[block, :, offset] = torch.cat([keys[row][p], values[row][p]], dim=-1)
    cache = cache.to(device)
    impl = OpenRegAttentionImpl(HEADS, HEAD_SIZE, SCALE, KV_HEADS)
    padding = torch.randn(3, KV_HEADS, HEAD_SIZE)
    new_keys = torch.cat([k[c - n :] for (c, n), k in zip(REQUESTS, keys, strict=True)] + [padding])
    new_values = torch.cat([v[c - n :] for (c, n), v in zip(REQUESTS, values, strict=True)] + [padding])
    impl.do_kv_cache_update(None, new_keys.to(device), new_values.to(device), cache, slots)
    assert cache[0].abs().sum().item() == 0, "a padding token was written to the cache"

    common = CommonAttentionMetadata(
        query_start_loc=starts.to(device), query_start_loc_cpu=starts,
        seq_lens=torch.tensor([c for c, _ in REQUESTS], dtype=torch.int32, device=device),
        num_reqs=len(REQUESTS), num_actual_tokens=new_tokens, max_query_len=max(n for _, n in REQUESTS),
        max_seq_len=max(c for c, _ in REQUESTS), block_table_tensor=table.to(device), slot_mapping=slots,
    )  # fmt: skip
    builder = OpenRegAttentionMetadataBuilder(types.SimpleNamespace(block_size=BLOCK), [], None, device)
    metadata = builder.build(0, common)
    output = torch.full((new_tokens + 3, HEADS, HEAD_SIZE), 7.0, device=device)
    impl.forward(None, queries.to(device), None, None, cache, metadata, output)

    assert output.device.type == "openreg"
    torch.testing.assert_close(output[:new_tokens].cpu(), _reference(keys, values, queries), rtol=1e-5, atol=1e-5)
    assert (output[new_tokens:] == 7.0).all().item(), "rows past the real tokens were written"
