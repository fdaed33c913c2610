"""Pinned host memory: pin_memory, is_pinned, DataLoader pinning, and copies that are truly
asynchronous with pinned memory and complete on return with pageable memory."""

import time

import torch
from torch.utils.data import DataLoader, TensorDataset

openreg = torch.openreg


def test_pin_memory_and_is_pinned():
    x = torch.randn(100, 10)
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    assert torch.equal(p, x)
    e = torch.empty(7, pin_memory=True)
    assert e.is_pinned()
    assert torch.randn(3).to("openreg").cpu().is_pinned() is False


def test_non_blocking_copies_with_pinned_memory_are_asynchronous():
    x = torch.randn(512, 512)
    pinned = x.pin_memory()
    back = torch.empty_like(x).pin_memory()
    s = openreg.Stream()
    with openreg.stream(s):
        openreg._sleep(100)
        start = time.monotonic()
        d = pinned.to("openreg", non_blocking=True)
        back.copy_(d, non_blocking=True)
        elapsed = time.monotonic() - start
        assert not s.query()  # both copies are still queued behind the sleep
    assert elapsed < 0.08
    s.synchronize()
    assert torch.equal(back, x)


def test_copies_with_pageable_memory_complete_on_return():
    x = torch.randn(256, 256)
    s = openreg.Stream()
    with openreg.stream(s):
        openreg._sleep(50)
        d = x.to("openreg", non_blocking=True)  # pageable: completes before returning
        assert s.query()
        host = torch.empty_like(x)
        host.copy_(d, non_blocking=True)
        assert torch.equal(host, x)


def test_pinned_block_is_not_reused_while_a_copy_reads_it():
    s = openreg.Stream()
    with openreg.stream(s):
        openreg._sleep(100)
        src = torch.full((1 << 16,), 3.0).pin_memory()
        address = src.data_ptr()
        d = src.to("openreg", non_blocking=True)
        del src
        other = torch.empty(1 << 16).pin_memory()  # same size: would reuse the block if allowed
        assert other.data_ptr() != address
        other.fill_(-1.0)
    s.synchronize()
    assert torch.equal(d.cpu(), torch.full((1 << 16,), 3.0))


def test_dataloader_pins_batches_for_openreg():
    data = TensorDataset(torch.arange(32.0).reshape(16, 2), torch.arange(16))
    loader = DataLoader(data, batch_size=4, pin_memory=True)
    batches = list(loader)
    assert len(batches) == 4
    for features, labels in batches:
        assert features.is_pinned() and labels.is_pinned()
        moved = features.to("openreg", non_blocking=True)
        assert torch.equal(moved.cpu(), features)
