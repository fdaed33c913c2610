"""torch.save / torch.load on openreg: tensors, views, modules, optimizers and checkpoints, every
map_location form, weights_only=True, backend metadata, and loading where a device is missing.
The CPU is the oracle: what is saved from openreg must load back bitwise equal to the same values
computed on the CPU, with the device, dtype, strides and storage sharing PyTorch gives the CPU."""

import io

import pytest
import torch
from torch import nn

from conftest import run_python

openreg = torch.openreg

DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.complex64,
    torch.int64,
    torch.int32,
    torch.int8,
    torch.uint8,
    torch.bool,
]


def round_trip(obj, **load_kwargs):
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    buffer.seek(0)
    return torch.load(buffer, **load_kwargs)


def cpu_values(dtype, shape=(4, 5)):
    generator = torch.Generator().manual_seed(0)
    if dtype == torch.bool:
        return torch.rand(shape, generator=generator) > 0.5
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=generator, dtype=dtype)
    return torch.randint(-100 if dtype.is_signed else 0, 100, shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_tensor_round_trip_keeps_values_dtype_and_device(dtype, device):
    x = cpu_values(dtype)
    loaded = round_trip(x.to(device))
    assert loaded.device == torch.device(device)
    assert loaded.dtype == dtype and loaded.shape == x.shape
    assert torch.equal(loaded.cpu(), x)


@pytest.mark.parametrize("weights_only", [True, False])
def test_views_saved_together_reload_sharing_one_storage(weights_only):
    def views(base):
        return [base, base[1:3], base.t(), base.view(-1)[5:17:3], base[:, 2]]

    cpu = views(torch.arange(24.0).reshape(4, 6))
    dev = views(torch.arange(24.0).reshape(4, 6).to("openreg"))
    loaded = round_trip(dev, weights_only=weights_only)
    storages = {t.untyped_storage().data_ptr() for t in loaded}
    assert len(storages) == 1 and all(t.is_openreg for t in loaded)
    for got, want in zip(loaded, cpu, strict=True):
        assert got.shape == want.shape
        assert got.stride() == want.stride()
        assert got.storage_offset() == want.storage_offset()
        assert torch.equal(got.cpu(), want)
    # The sharing is real: a write through the base shows in every view, as on the CPU.
    loaded[0].mul_(-1)
    cpu[0].mul_(-1)
    for got, want in zip(loaded, cpu, strict=True):
        assert torch.equal(got.cpu(), want)


def test_a_view_saved_alone_keeps_its_whole_storage():
    base = torch.arange(10.0)
    loaded = round_trip(base.to("openreg")[3:6])
    assert loaded.storage_offset() == 3
    assert loaded.untyped_storage().nbytes() == base.untyped_storage().nbytes()
    assert torch.equal(loaded.cpu(), base[3:6])


def test_save_waits_for_queued_work_on_the_current_stream():
    x = torch.randn(64, 64)
    d = x.to("openreg")
    openreg._sleep(50)  # the update below is queued behind the sleep when save starts
    d.add_(1)
    assert torch.equal(round_trip(d).cpu(), x + 1)


def make_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))


def train_steps(model, optimizer, device, steps=3):
    generator = torch.Generator().manual_seed(1)
    for _ in range(steps):
        inputs = torch.randn(5, 2, 6, 6, generator=generator).to(device)
        target = torch.randint(0, 3, (5,), generator=generator).to(device)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(inputs), target).backward()
        optimizer.step()


def assert_state_equal(got, want, device):
    assert got.keys() == want.keys()
    for key in want:
        assert got[key].device == torch.device(device), key
        assert torch.equal(got[key].cpu(), want[key]), key


def test_module_state_dict_round_trip_equals_the_cpu():
    cpu_model = make_model()
    model = make_model().to("openreg")
    loaded = round_trip(model.state_dict(), weights_only=True)
    assert_state_equal(loaded, cpu_model.state_dict(), "openreg:0")
    fresh = nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 3))
    fresh.to("openreg").load_state_dict(loaded)
    inputs = torch.randn(2, 2, 6, 6)
    assert torch.equal(fresh.eval()(inputs.to("openreg")).cpu(), cpu_model.eval()(inputs))


def test_whole_module_round_trip_without_weights_only():
    cpu_model = make_model()
    loaded = round_trip(make_model().to("openreg:1"), weights_only=False)
    assert isinstance(loaded, nn.Sequential)
    assert all(p.device == torch.device("openreg:1") for p in loaded.parameters())
    inputs = torch.randn(2, 2, 6, 6)
    assert torch.equal(loaded.eval()(inputs.to("openreg:1")).cpu(), cpu_model.eval()(inputs))


def test_optimizer_state_round_trip_continues_training_like_the_cpu():
    def run(device):
        model = make_model().to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        train_steps(model, optimizer, device)
        checkpoint = round_trip({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, weights_only=True)
        restored = make_model().to(device)
        restored.load_state_dict(checkpoint["model"])
        restored_optimizer = torch.optim.Adam(restored.parameters(), lr=0.01)
        restored_optimizer.load_state_dict(checkpoint["optimizer"])
        train_steps(restored, restored_optimizer, device)
        return checkpoint, restored, restored_optimizer

    cpu_checkpoint, cpu_model, cpu_optimizer = run("cpu")
    checkpoint, model, optimizer = run("openreg")
    for index, state in checkpoint["optimizer"]["state"].items():
        assert state["exp_avg"].is_openreg and state["exp_avg_sq"].is_openreg
        assert torch.equal(state["exp_avg"].cpu(), cpu_checkpoint["optimizer"]["state"][index]["exp_avg"])
        assert torch.equal(state["exp_avg_sq"].cpu(), cpu_checkpoint["optimizer"]["state"][index]["exp_avg_sq"])
    assert_state_equal(model.state_dict(), cpu_model.state_dict(), "openreg:0")
    moments = optimizer.state_dict()["state"][0]["exp_avg"]
    assert moments.is_openreg and torch.equal(moments.cpu(), cpu_optimizer.state_dict()["state"][0]["exp_avg"])


def test_whole_checkpoint_with_rng_states_round_trips_with_weights_only():
    model = make_model().to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_steps(model, optimizer, "openreg")
    openreg.manual_seed(7)
    checkpoint = {
        "epoch": 3,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "rng": {"cpu": torch.get_rng_state(), "openreg": openreg.get_rng_state()},
        "history": [torch.tensor([0.5, 0.25], device="openreg:1")],
    }
    loaded = round_trip(checkpoint, weights_only=True)
    assert loaded["epoch"] == 3
    assert_state_equal(loaded["model"], {k: v.cpu() for k, v in model.state_dict().items()}, "openreg:0")
    assert loaded["history"][0].device == torch.device("openreg:1")
    expected = openreg.get_rng_state()
    assert torch.equal(loaded["rng"]["openreg"], expected)
    # Restoring the saved generator state reproduces the same random numbers.
    first = torch.randn(8, device="openreg").cpu()
    openreg.set_rng_state(loaded["rng"]["openreg"])
    assert torch.equal(torch.randn(8, device="openreg").cpu(), first)


MAP_LOCATIONS = {
    "str cpu": ("cpu", "cpu"),
    "device cpu": (torch.device("cpu"), "cpu"),
    "str openreg:0": ("openreg:0", "openreg:0"),
    "device openreg:1": (torch.device("openreg", 1), "openreg:1"),
    "dict openreg:1 to openreg:0": ({"openreg:1": "openreg:0"}, "openreg:0"),
    "dict openreg:1 to cpu": ({"openreg:1": "cpu"}, "cpu"),
    "callable storage.openreg(0)": (lambda storage, location: storage.openreg(0), "openreg:0"),
    "callable storage.cpu()": (lambda storage, location: storage.cpu(), "cpu"),
    "callable returning None": (lambda storage, location: None, "openreg:1"),
}


@pytest.mark.parametrize("name", MAP_LOCATIONS)
def test_map_location_from_openreg(name):
    map_location, expected = MAP_LOCATIONS[name]
    x = torch.randn(3, 4)
    base = x.to("openreg:1")
    loaded = round_trip([base, base[1:]], map_location=map_location, weights_only=True)
    assert [t.device for t in loaded] == [torch.device(expected)] * 2
    assert loaded[0].untyped_storage().data_ptr() == loaded[1].untyped_storage().data_ptr()
    assert torch.equal(loaded[0].cpu(), x) and torch.equal(loaded[1].cpu(), x[1:])


@pytest.mark.parametrize(
    "map_location,expected",
    [
        ("openreg", "openreg:0"),
        ("openreg:1", "openreg:1"),
        ({"cpu": "openreg:1"}, "openreg:1"),
        (lambda storage, location: storage.openreg(1), "openreg:1"),
    ],
    ids=["str openreg", "str openreg:1", "dict", "callable"],
)
def test_map_location_from_cpu_to_openreg(map_location, expected):
    model = make_model()
    loaded = round_trip(model.state_dict(), map_location=map_location, weights_only=True)
    assert_state_equal(loaded, model.state_dict(), expected)


def test_load_with_mmap_onto_openreg(tmp_path):
    x = torch.randn(100, 7)
    path = tmp_path / "x.pt"
    torch.save({"x": x.to("openreg:1")}, path)
    loaded = torch.load(path, mmap=True, weights_only=True)
    assert loaded["x"].device == torch.device("openreg:1") and torch.equal(loaded["x"].cpu(), x)
    on_cpu = torch.load(path, mmap=True, map_location="cpu", weights_only=True)
    assert on_cpu["x"].device.type == "cpu" and torch.equal(on_cpu["x"], x)


def test_saved_location_tags_name_the_openreg_device():
    for device in ("openreg:0", "openreg:1"):
        storage = torch.ones(2, device=device).untyped_storage()
        assert torch.serialization.location_tag(storage) == device
    restored = torch.serialization.default_restore_location(torch.ones(2).untyped_storage(), "openreg:1")
    assert restored.device == torch.device("openreg:1")


# Backend metadata: Note [Backend metadata] in csrc/core/Serialization.h.


def test_backend_meta_is_set_read_and_round_trips():
    d = torch.arange(6.0, device="openreg:1")
    assert torch._utils.get_tensor_metadata(d) == {}
    torch._utils.set_tensor_metadata(d, {"openreg_tagged": True, "openreg_off": False})
    assert torch._utils.get_tensor_metadata(d) == {"openreg_tagged": True, "openreg_off": False}
    loaded = round_trip(d, weights_only=True)
    assert loaded.device == torch.device("openreg:1")
    assert torch._utils.get_tensor_metadata(loaded) == {"openreg_tagged": True, "openreg_off": False}
    moved = round_trip(d, map_location="openreg:0", weights_only=True)
    assert torch._utils.get_tensor_metadata(moved) == {"openreg_tagged": True, "openreg_off": False}
    assert torch.equal(loaded.cpu(), torch.arange(6.0)) and torch.equal(moved.cpu(), torch.arange(6.0))


def test_backend_meta_is_dropped_on_the_cpu_and_kept_with_conj():
    d = torch.tensor([1 + 2j, 3 - 1j], device="openreg").conj()
    torch._utils.set_tensor_metadata(d, {"openreg_tagged": True})
    assert torch._utils.get_tensor_metadata(d) == {"conj": True, "openreg_tagged": True}
    on_cpu = round_trip(d, map_location="cpu", weights_only=True)
    assert torch._utils.get_tensor_metadata(on_cpu) == {"conj": True}
    assert torch.equal(on_cpu.resolve_conj(), torch.tensor([1 - 2j, 3 + 1j]))
    on_device = round_trip(d, weights_only=True)
    assert torch._utils.get_tensor_metadata(on_device) == {"conj": True, "openreg_tagged": True}
    assert torch.equal(on_device.cpu().resolve_conj(), torch.tensor([1 - 2j, 3 + 1j]))


def test_backend_meta_follows_shallow_copies_but_not_new_tensors():
    d = torch.ones(3, device="openreg")
    torch._utils.set_tensor_metadata(d, {"openreg_tagged": True})
    detached = d.detach()
    assert torch._utils.get_tensor_metadata(detached) == {"openreg_tagged": True}
    torch._utils.set_tensor_metadata(detached, {"openreg_other": True})  # its own copy
    assert torch._utils.get_tensor_metadata(d) == {"openreg_tagged": True}
    assert torch._utils.get_tensor_metadata(d.clone()) == {}
    assert torch._utils.get_tensor_metadata(d[1:]) == {}


def test_backend_meta_refuses_names_that_are_not_openreg_s():
    d = torch.ones(3, device="openreg")
    with pytest.raises(RuntimeError, match=r"'tagged' for a tensor on openreg:0 is not openreg backend metadata"):
        torch._utils.set_tensor_metadata(d, {"tagged": True, "openreg_ok": True})
    assert torch._utils.get_tensor_metadata(d) == {}  # nothing was applied


def test_backend_meta_accepts_the_in_tree_reference_s_flags():
    # Code written for PyTorch's in-tree openreg sets these two; they round-trip like ours.
    d = torch.ones(3, device="openreg")
    torch._utils.set_tensor_metadata(d, {"version_number": True, "format_number": False})
    assert torch._utils.get_tensor_metadata(d) == {"format_number": False, "version_number": True}
    loaded = round_trip(d, weights_only=True)
    assert torch._utils.get_tensor_metadata(loaded) == {"format_number": False, "version_number": True}


# Fewer devices at load time than at save time.


def test_loading_onto_a_missing_device_is_a_clear_error_and_map_location_remaps(tmp_path):
    x = torch.randn(5, 3)
    path = tmp_path / "on_device_1.pt"
    torch.save({"x": x.to("openreg:1"), "y": x.to("openreg:0")}, path)
    torch.save(x, tmp_path / "expected.pt")
    result = run_python(
        f"""
        import torch
        path, expected = {str(path)!r}, torch.load({str(tmp_path / "expected.pt")!r})
        assert torch.openreg.device_count() == 1
        try:
            torch.load(path, weights_only=True)
        except RuntimeError as error:
            print("ERROR", error)
        for where in ("openreg:0", {{"openreg:1": "openreg:0"}}, "cpu",
                      lambda storage, location: storage.openreg(0)):
            got = torch.load(path, map_location=where, weights_only=True)
            print("REMAP", got["x"].device, torch.equal(got["x"].cpu(), expected),
                  torch.equal(got["y"].cpu(), expected))
        """,
        env={"OPENREG_DEVICE_COUNT": "1"},
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    error = lines[0]
    assert "OPENREG device 1" in error and "device_count() is 1" in error and "map_location" in error
    assert lines[1:] == [
        "REMAP openreg:0 True True",
        "REMAP openreg:0 True True",
        "REMAP cpu True True",
        "REMAP openreg:0 True True",
    ]


def test_loading_openreg_checkpoints_without_the_backend_maps_to_the_cpu(tmp_path):
    x = torch.randn(4)
    path = tmp_path / "x.pt"
    torch.save(x.to("openreg:1"), path)
    torch.save(x, tmp_path / "expected.pt")
    result = run_python(
        f"""
        import torch
        expected = torch.load({str(tmp_path / "expected.pt")!r})
        got = torch.load({str(path)!r}, map_location="cpu", weights_only=True)
        print(got.device, torch.equal(got, expected))
        """,
        env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "True"]
