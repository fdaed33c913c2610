"""openreg's vLLM attention backend alone (torch_openreg/vllm/attention.py, `make test-vllm`): one
step of a batch mixing a full prefill, a chunked prefill continuing a cached context, and decodes
of different context lengths, grouped-query heads, over a paged cache whose blocks are scattered;
against causal attention computed per request on the CPU from the unpaged keys and values. Then the
decodes alone through the fixed buffers that graphs replay (Note [Decode metadata in fixed
buffers]), eagerly and captured in a graph replayed on a later step. Also the slot mapping that
replaces vLLM's Triton kernel (torch_openreg/vllm/kernels.py)."""

from __future__ import annotations

import types

import numpy as np
import torch
import torch.nn.functional as F
from vllm.config import CUDAGraphMode
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


def _builder(device: torch.device, graphs: CUDAGraphMode = CUDAGraphMode.NONE) -> OpenRegAttentionMetadataBuilder:
    """The builder with the parts of vLLM's configuration it reads (8 requests, 64 positions)."""
    config = types.SimpleNamespace(
        compilation_config=types.SimpleNamespace(cudagraph_mode=graphs, max_cudagraph_capture_size=8),
        scheduler_config=types.SimpleNamespace(max_num_seqs=8),
        model_config=types.SimpleNamespace(max_model_len=64),
    )
    return OpenRegAttentionMetadataBuilder(types.SimpleNamespace(block_size=BLOCK), [], config, device)


def _cache(keys, values, table, written) -> torch.Tensor:
    """The paged cache holding the first written(row) positions of each request."""
    cache = torch.zeros(BLOCKS, KV_HEADS, BLOCK, 2 * HEAD_SIZE)
    for row, (context, new) in enumerate(REQUESTS):
        for p in range(written(context, new)):
            block, offset = int(table[row, p // BLOCK]), p % BLOCK
            cache[block, :, offset] = torch.cat([keys[row][p], values[row][p]], dim=-1)
    return cache


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
    cache = _cache(keys, values, table, lambda context, new: context - new).to(device)
    impl = OpenRegAttentionImpl(HEADS, HEAD_SIZE, SCALE, KV_HEADS)
    padding = torch.randn(3, KV_HEADS, HEAD_SIZE)
    new_keys = torch.cat([k[c - n :] for (c, n), k in zip(REQUESTS, keys, strict=True)] + [padding])
    new_values = torch.cat([v[c - n :] for (c, n), v in zip(REQUESTS, values, strict=True)] + [padding])
    impl.do_kv_cache_update(None, new_keys.to(device), new_values.to(device), cache, slots)
    # Padding (slot -1) goes to slot 0 of vLLM's null block 0, which no request owns.
    assert cache[0, :, 1:].abs().sum().item() == 0 and cache[0, :, 0].abs().sum().item() > 0

    common = CommonAttentionMetadata(
        query_start_loc=starts.to(device), query_start_loc_cpu=starts,
        seq_lens=torch.tensor([c for c, _ in REQUESTS], dtype=torch.int32, device=device),
        num_reqs=len(REQUESTS), num_actual_tokens=new_tokens, max_query_len=max(n for _, n in REQUESTS),
        max_seq_len=max(c for c, _ in REQUESTS), block_table_tensor=table.to(device), slot_mapping=slots,
    )  # fmt: skip
    metadata = _builder(device).build(0, common)
    output = torch.full((new_tokens + 3, HEADS, HEAD_SIZE), 7.0, device=device)
    impl.forward(None, queries.to(device), None, None, cache, metadata, output)

    assert output.device.type == "openreg"
    torch.testing.assert_close(output[:new_tokens].cpu(), _reference(keys, values, queries), rtol=1e-5, atol=1e-5)
    assert (output[new_tokens:] == 7.0).all().item(), "rows past the real tokens were written"


# The decodes of REQUESTS whose context has an earlier step (13, 16 and 17 positions: the last two
# end a block and start one).
DECODES = [row for row, (context, new) in enumerate(REQUESTS) if new == 1 and context > 1]


def _decode_step(table, context, device, builder):
    """A decode batch of the DECODES requests at the given context lengths, padded with one empty
    request (context 0, a row of the null block), as vLLM pads a batch to a graph's size."""
    rows = len(DECODES) + 1
    padded = torch.zeros(rows, table.shape[1], dtype=torch.int32)
    padded[: len(DECODES)] = table[DECODES]
    common = CommonAttentionMetadata(
        query_start_loc=torch.tensor([*range(rows), rows - 1], dtype=torch.int32, device=device),
        query_start_loc_cpu=torch.tensor([*range(rows), rows - 1], dtype=torch.int32),
        seq_lens=torch.tensor([*context, 0], dtype=torch.int32, device=device),
        num_reqs=rows, num_actual_tokens=rows, max_query_len=1, max_seq_len=max(context),
        block_table_tensor=padded.to(device), slot_mapping=torch.full((rows,), -1, device=device),
    )  # fmt: skip
    return builder.build(0, common)


def _decode_reference(keys, values, queries, context) -> torch.Tensor:
    rows = []
    for i, (row, length) in enumerate(zip(DECODES, context, strict=True)):
        q = queries[i : i + 1].transpose(0, 1)[None]
        k, v = keys[row][:length].transpose(0, 1)[None], values[row][:length].transpose(0, 1)[None]
        rows.append(F.scaled_dot_product_attention(q, k, v, scale=SCALE, enable_gqa=True)[0].transpose(0, 1))
    return torch.cat(rows)


def test_decodes_in_fixed_buffers_equal_per_request_attention_eagerly_and_replayed():
    """With FULL graphs on, a decode batch's metadata is written into the builder's buffers (the
    same addresses every step); a graph captured on one step and replayed after the next step's
    metadata was written computes that next step's attention. Both against the CPU."""
    keys, values, queries, table = _batch()
    device = torch.device("openreg", 0)
    impl = OpenRegAttentionImpl(HEADS, HEAD_SIZE, SCALE, KV_HEADS)
    cache = _cache(keys, values, table, lambda context, new: context).to(device)
    builder = _builder(device, CUDAGraphMode.FULL_DECODE_ONLY)
    rows = len(DECODES) + 1
    step_queries = queries[:rows].to(device)
    output = torch.zeros(rows, HEADS, HEAD_SIZE, device=device)

    first = [REQUESTS[row][0] - 1 for row in DECODES]  # one step before the end of each context
    metadata = _decode_step(table, first, device, builder)
    assert metadata.context_offsets is None and metadata.context_blocks.data_ptr() == builder.decode_blocks.data_ptr()
    impl.forward(None, step_queries, None, None, cache, metadata, output)
    want = _decode_reference(keys, values, queries, first)
    torch.testing.assert_close(output[: len(DECODES)].cpu(), want, rtol=1e-5, atol=1e-5)

    graph = torch.accelerator.Graph()
    with torch.openreg.stream(torch.openreg.Stream()):
        graph.capture_begin()
        impl.forward(None, step_queries, None, None, cache, metadata, output)
        graph.capture_end()
    second = [REQUESTS[row][0] for row in DECODES]  # the next step: one more position each
    metadata = _decode_step(table, second, device, builder)
    assert metadata.context_blocks.data_ptr() == builder.decode_blocks.data_ptr()
    output.zero_()
    graph.replay()
    want = _decode_reference(keys, values, queries, second)
    torch.testing.assert_close(output[: len(DECODES)].cpu(), want, rtol=1e-5, atol=1e-5)
    assert torch.isfinite(output[len(DECODES) :]).all().item(), "the padded request's row is not finite"
