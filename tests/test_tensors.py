"""Tensors on openreg: creation, copies in every direction, views, resize, set_, scalars,
printing. CPU is the oracle: every value is compared with the same tensor on the CPU, bitwise."""

import pytest
import torch

DEVICES = ["openreg:0", "openreg:1"]
DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64, torch.bool, torch.complex64]


def sample(dtype, shape=(4, 5), seed=0):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=g, dtype=dtype)
    return torch.randint(-100 if dtype.is_signed else 0, 100, shape, generator=g).to(dtype)


def same(a, b):
    """Bitwise equality with the same dtype and shape (NaNs and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_is_bitwise(device, dtype):
    x = sample(dtype)
    d = x.to(device)
    assert d.device == torch.device(device) and d.dtype == dtype and d.shape == x.shape
    assert d.is_openreg and not x.is_openreg
    assert same(d.cpu(), x)


@pytest.mark.parametrize("device", DEVICES)
def test_factories_fill_and_scalars(device):
    assert torch.equal(torch.zeros(3, 2, device=device).cpu(), torch.zeros(3, 2))
    assert torch.equal(torch.ones(4, dtype=torch.int64, device=device).cpu(), torch.ones(4, dtype=torch.int64))
    assert torch.equal(torch.full((2, 2), 7.25, device=device).cpu(), torch.full((2, 2), 7.25))
    e = torch.empty_strided((2, 3), (1, 2), device=device)
    assert e.stride() == (1, 2) and e.device == torch.device(device)
    assert torch.tensor(3.5).to(device).item() == 3.5
    assert torch.tensor([1, 2, 3]).to(device).tolist() == [1, 2, 3]
    z = torch.empty(0, 3, device=device)
    assert z.shape == (0, 3) and z.cpu().shape == (0, 3)


def test_conversions_in_copies_match_cpu():
    x = sample(torch.float32)
    d = x.to("openreg")
    for dtype in (torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.bool, torch.complex64):
        assert same(d.to(dtype).cpu(), x.to(dtype)), dtype
        assert same(x.to("openreg", dtype=dtype).cpu(), x.to(dtype)), dtype


def test_non_contiguous_and_broadcast_copies():
    x = sample(torch.float32, (6, 8))
    d = x.to("openreg")
    assert same(d.t().cpu(), x.t().contiguous())           # device strided -> host
    assert same(d[::2, 1::3].cpu(), x[::2, 1::3].contiguous())
    h = x.t()                                              # host strided -> device
    assert same(h.to("openreg").cpu(), h.contiguous())
    target = torch.empty(3, 8, device="openreg")
    target.copy_(torch.arange(8.0))                        # broadcast
    assert same(target.cpu(), torch.arange(8.0).expand(3, 8).contiguous())
    target[1].copy_(d[0])                                  # device -> device view
    assert same(target.cpu()[1], x[0])
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        target.copy_(torch.ones(5))


def test_copies_between_devices_and_streams():
    x = sample(torch.float64, (33, 7))
    on1 = x.to("openreg:0").to("openreg:1")
    assert on1.device == torch.device("openreg:1")
    assert same(on1.cpu(), x)
    back = torch.empty_like(on1, device="openreg:0")
    back.copy_(on1.t().t())
    assert same(back.cpu(), x)
    s = torch.openreg.Stream(device=1)
    with torch.openreg.stream(s):
        torch.openreg._sleep(30)
        y = x.to("openreg:1", non_blocking=True)
    assert same(y.cpu(), x)  # the blocking copy to the host waits for the stream's work


def test_views_share_storage():
    x = sample(torch.float32, (4, 6))
    d = x.to("openreg")
    views = [d[1], d.t(), d.view(24), d.reshape(6, 4), d[:, 2:], d.unsqueeze(0), d.as_strided((2, 2), (1, 6), 3)]
    for v in views:
        assert v.untyped_storage().data_ptr() == d.untyped_storage().data_ptr()
    assert same(d.as_strided((2, 2), (1, 6), 3).cpu(), x.as_strided((2, 2), (1, 6), 3).contiguous())
    d[2].copy_(torch.full((6,), -1.0))
    x[2] = -1.0
    assert same(d.cpu(), x)
    assert same(d.t()[3].cpu(), x.t()[3].contiguous())


def test_resize_keeps_leading_values():
    d = torch.arange(4.0).to("openreg")
    d.resize_(100)
    assert d.shape == (100,)
    assert same(d[:4].cpu(), torch.arange(4.0))
    d.resize_(2, 3)
    assert d.shape == (2, 3) and d.is_contiguous()
    d.resize_(3, 2, memory_format=torch.contiguous_format)
    storage = torch.arange(6.0).to("openreg").untyped_storage()
    storage.resize_(48)  # UntypedStorage.resize_ through the hooks
    assert storage.nbytes() == 48 and storage.device == torch.device("openreg:0")
    assert same(torch.tensor([], device="openreg").set_(storage, 0, (6,), (1,)).cpu(), torch.arange(6.0))


def test_set_variants():
    a = torch.arange(6.0).to("openreg")
    b = torch.empty(0, device="openreg")
    b.set_(a)
    assert b.data_ptr() == a.data_ptr() and same(b.cpu(), a.cpu())
    c = torch.empty(0, device="openreg").set_(a.untyped_storage(), 1, (2, 2), (1, 2))
    assert same(c.cpu(), torch.arange(6.0).as_strided((2, 2), (1, 2), 1).contiguous())
    d = torch.empty(0, device="openreg").set_(a.untyped_storage())
    assert same(d.cpu(), torch.arange(6.0))
    e = torch.empty(3, device="openreg").set_()
    assert e.shape == (0,)
    with pytest.raises(RuntimeError, match="storage is on cpu"):
        torch.empty(0, device="openreg").set_(torch.arange(3.0).untyped_storage())


@pytest.mark.parametrize("device", DEVICES)
def test_printing_matches_cpu(device):
    for x in (sample(torch.float32, (2, 3)), sample(torch.int64, (3,)), torch.tensor(2.5), torch.empty(0)):
        d = x.to(device)
        assert repr(d) == repr(x)[:-1] + f", device='{device}')"


def test_operators_without_a_kernel_run_through_the_copying_fallback():
    x, y = sample(torch.float32, (5, 4), 1), sample(torch.float32, (4, 3), 2)
    dx, dy = x.to("openreg"), y.to("openreg")
    assert same((dx + 1).cpu(), x + 1)
    assert same(torch.mm(dx, dy).cpu(), torch.mm(x, y))
    assert (dx * 2).device == torch.device("openreg:0")


def test_deterministic_mode_fills_new_memory_as_the_cpu_does():
    """torch.use_deterministic_algorithms(True): empty, empty_strided and the grown part of resize_
    read as NaN (an integer type's largest value), as on the CPU and CUDA."""
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        results = []
        for device in ("cpu", "openreg"):
            grown = torch.zeros(2, device=device)
            grown.resize_(4)
            results.append([
                torch.empty(3, device=device).cpu(),
                torch.empty(2, dtype=torch.int32, device=device).cpu(),
                torch.empty_strided((2, 2), (1, 2), device=device).cpu(),
                grown.cpu(),
            ])
        for cpu, dev in zip(*results, strict=True):
            assert torch.equal(cpu.nan_to_num(7.0), dev.nan_to_num(7.0)) and cpu.isnan().any() == dev.isnan().any()
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = True
        torch.use_deterministic_algorithms(previous)
