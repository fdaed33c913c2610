"""Storages and device descriptions on openreg: UntypedStorage moves (.openreg(), .cpu(), .to()),
pinning, share_memory_, Tensor.is_openreg, tensor.new_*, and Tensor.data swaps between the CPU
and openreg. The CPU is the oracle: bytes, values, devices and dtypes must match it."""

import pytest
import torch
from torch import nn

openreg = torch.openreg


def test_untyped_storage_moves_between_cpu_and_devices():
    x = torch.randn(6, 5)
    cpu_storage = x.untyped_storage()
    on0 = cpu_storage.openreg()
    on1 = cpu_storage.openreg(1)
    assert on0.device == torch.device("openreg:0") and on1.device == torch.device("openreg:1")
    assert on0.is_openreg and on1.is_openreg and not cpu_storage.is_openreg
    assert on0.nbytes() == on1.nbytes() == cpu_storage.nbytes()
    assert on0.openreg(0) is on0  # already there: no copy
    across = on0.openreg(1)
    assert across.device == torch.device("openreg:1") and across.data_ptr() != on1.data_ptr()
    for storage in (on0, on1, across, on1.to(device="openreg:0")):
        back = storage.cpu()
        assert back.device.type == "cpu"
        assert torch.equal(torch.tensor([], dtype=torch.float32).set_(back).view(6, 5), x)
    assert on1.to(device="cpu").device.type == "cpu"


def test_tensor_untyped_storage_is_the_device_storage():
    d = torch.arange(12, dtype=torch.int16, device="openreg:1").view(3, 4)[1:]
    storage = d.untyped_storage()
    assert storage.device == torch.device("openreg:1") and storage.is_openreg
    assert storage.nbytes() == 24 and storage.data_ptr() == d.data_ptr() - 8
    as_cpu = torch.tensor([], dtype=torch.int16).set_(storage.cpu())
    assert torch.equal(as_cpu, torch.arange(12, dtype=torch.int16))


def test_storage_copy_fill_and_new_storages():
    storage = torch.UntypedStorage(16, device="openreg:1")
    assert storage.device == torch.device("openreg:1") and storage.nbytes() == 16
    storage.fill_(7)
    assert storage.cpu().tolist() == [7] * 16
    source = torch.arange(16, dtype=torch.uint8).untyped_storage()
    storage.copy_(source)
    assert storage.cpu().tolist() == list(range(16))
    clone = storage.clone()
    assert clone.device == storage.device and clone.data_ptr() != storage.data_ptr()
    assert clone.cpu().tolist() == list(range(16))
    # new() allocates through the storage's allocator on the current device, as CUDA's does.
    with openreg.device(1):
        fresh = storage.new()
    assert fresh.device == storage.device and fresh.nbytes() == 0


def test_typed_storage_moves_keep_dtype():
    x = torch.randn(5, dtype=torch.float64)
    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        typed = x.storage().openreg(1)
    assert typed.is_openreg and typed.dtype == torch.float64 and typed.device == torch.device("openreg:1")
    assert typed.cpu().tolist() == x.tolist()


def test_pin_memory_and_is_pinned_on_storages():
    x = torch.randn(10)
    pinned = x.untyped_storage().pin_memory()
    assert pinned.is_pinned() and not x.untyped_storage().is_pinned()
    assert torch.equal(torch.tensor([]).set_(pinned), x)
    device_storage = x.untyped_storage().openreg()
    assert device_storage.is_pinned() is False
    with pytest.raises(TypeError, match="only CPU memory can be pinned"):
        device_storage.pin_memory()
    # A pinned storage moves to the device without blocking and arrives intact.
    moved = torch.empty(10, device="openreg").copy_(torch.tensor([]).set_(pinned), non_blocking=True)
    assert torch.equal(moved.cpu(), x)


def test_share_memory_is_a_no_op_for_device_storages_as_for_cuda():
    storage = torch.randn(8).untyped_storage().openreg()
    address = storage.data_ptr()
    assert storage.share_memory_() is storage and storage.data_ptr() == address
    assert storage.device == torch.device("openreg:0")
    cpu_storage = torch.randn(8).untyped_storage()
    assert cpu_storage.share_memory_().is_shared()


def test_is_openreg_on_tensors_parameters_and_modules():
    d = torch.ones(2, device="openreg:1")
    assert d.is_openreg and not d.cpu().is_openreg
    assert nn.Parameter(d).is_openreg
    model = nn.Linear(3, 2).openreg(1)
    assert all(p.is_openreg and p.device == torch.device("openreg:1") for p in model.parameters())


NEW_METHODS = [
    ("new_empty", lambda t: t.new_empty((2, 3)).fill_(0)),
    ("new_zeros", lambda t: t.new_zeros((2, 3))),
    ("new_ones", lambda t: t.new_ones((2, 3), dtype=torch.int32)),
    ("new_full", lambda t: t.new_full((4,), 2.5)),
    ("new_tensor", lambda t: t.new_tensor([[1, 2], [3, 4]])),
    ("new_empty_strided", lambda t: t.new_empty_strided((2, 3), (1, 2)).fill_(1)),
]


@pytest.mark.parametrize("name,make", NEW_METHODS, ids=[name for name, _ in NEW_METHODS])
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_new_methods_follow_the_source_device_and_match_the_cpu(name, make, device):
    source = torch.randn(3, dtype=torch.float64)
    want = make(source)
    got = make(source.to(device))
    assert got.device == torch.device(device)
    assert got.dtype == want.dtype and got.shape == want.shape and got.stride() == want.stride()
    assert torch.equal(got.cpu(), want)


def test_new_methods_accept_another_device():
    got = torch.ones(2, device="openreg:1").new_zeros(3, device="cpu")
    assert got.device.type == "cpu" and torch.equal(got, torch.zeros(3))
    got = torch.ones(2).new_ones(3, device="openreg:1")
    assert got.device == torch.device("openreg:1") and torch.equal(got.cpu(), torch.ones(3))


# Tensor.data swaps: Note [Shallow copies between the CPU and openreg] in csrc/aten/ShallowCopy.cpp.


def test_data_swaps_between_cpu_and_openreg():
    values = torch.randn(4, 3)
    param = nn.Parameter(values.clone())
    assert torch._has_compatible_shallow_copy_type(param, values.to("openreg"))
    param.data = values.to("openreg:1") * 2
    assert param.device == torch.device("openreg:1") and isinstance(param, nn.Parameter)
    assert torch.equal(param.detach().cpu(), values * 2)
    (param * param).sum().backward()
    assert param.grad.device == torch.device("openreg:1")
    assert torch.equal(param.grad.cpu(), values * 4)
    param.data = values.clone()
    assert param.device.type == "cpu" and torch.equal(param.detach(), values)
    param.data = values.to("openreg:0")
    assert param.device == torch.device("openreg:0") and torch.equal(param.detach().cpu(), values)


def test_data_swap_between_openreg_devices():
    t = torch.zeros(3, device="openreg:0")
    t.data = torch.ones(3, device="openreg:1")
    assert t.device == torch.device("openreg:1") and torch.equal(t.cpu(), torch.ones(3))


def test_module_move_keeps_parameter_objects_so_an_earlier_optimizer_trains_like_the_cpu():
    def train(device):
        torch.manual_seed(0)
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        params = list(model.parameters())
        model.to(device)  # after the optimizer was built, as CUDA code often does
        assert [id(p) for p in model.parameters()] == [id(p) for p in params]
        generator = torch.Generator().manual_seed(3)
        for _ in range(3):
            inputs = torch.randn(6, 4, generator=generator).to(device)
            optimizer.zero_grad()
            model(inputs).square().mean().backward()
            optimizer.step()
        return [p.detach().cpu() for p in model.parameters()]

    for got, want in zip(train("openreg"), train("cpu"), strict=True):
        assert torch.equal(got, want)


def test_data_swap_refuses_other_layouts():
    sparse = torch.eye(3).to_sparse()
    assert not torch._has_compatible_shallow_copy_type(torch.ones(3, device="openreg"), sparse)
    with pytest.raises(RuntimeError, match="incompatible tensor type"):
        torch.ones(3, 3, device="openreg").data = sparse


def test_legacy_storage_classes_exist_as_on_cuda():
    """tensor.storage_type() and TypedStorage.type() name torch.openreg.<Name>Storage, as CUDA's
    name torch.cuda.<Name>Storage; the classes make storages on the device (torch_openreg/openreg/storage.py)."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TypedStorage is deprecated
        t = torch.ones(3, device="openreg")
        assert t.storage_type() is torch.openreg.FloatStorage
        assert t.to(torch.int64).storage_type() is torch.openreg.LongStorage
        assert t.storage().type() == "torch.openreg.FloatStorage"
        s = torch.openreg.DoubleStorage([1.0, 2.0, 3.0])
        assert s.device.type == "openreg" and s.dtype == torch.float64 and s.tolist() == [1.0, 2.0, 3.0]
        assert isinstance(torch.openreg.ByteStorage(2), torch.storage.TypedStorage)


def test_is_set_to_compares_storage_and_geometry():
    t = torch.empty(3, device="openreg")
    s = torch.empty(0, device="openreg")
    s.set_(t)
    assert s.is_set_to(t) and not s.is_set_to(t[1:]) and not torch.empty(3, device="openreg").is_set_to(t)
