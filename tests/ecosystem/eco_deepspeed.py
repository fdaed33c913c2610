"""DeepSpeed on openreg through torch_openreg.deepspeed.OpenRegAccelerator: the accelerator's methods
against torch.openreg and the CPU, and ZeRO stages 1, 2 and 3 on 2 ranks against DeepSpeed's own
CPU accelerator on Gloo (docs/ecosystem.md)."""

import pathlib

import pytest
import torch
from deepspeed.accelerator.abstract_accelerator import DeepSpeedAccelerator
from ecosystem_runs import assert_same_tensors, run_script

from torch_openreg.deepspeed import OpenRegAccelerator


def test_every_abstract_method_of_deepspeeds_interface_is_implemented():
    abstract = set(DeepSpeedAccelerator.__abstractmethods__)
    assert len(abstract) > 60
    assert not OpenRegAccelerator.__abstractmethods__
    accelerator = OpenRegAccelerator()  # an ABC with a missing method would refuse this
    assert accelerator._name == "openreg" and accelerator.communication_backend_name() == "occl"


def test_devices_memory_and_dtypes_are_torch_openregs():
    accelerator = OpenRegAccelerator()
    assert accelerator.device_count() == torch.openreg.device_count() and accelerator.is_available()
    assert accelerator.device(1) == torch.device("openreg", 1) and accelerator.device_name(1) == "openreg:1"
    accelerator.set_device(1)
    assert accelerator.current_device() == 1 and accelerator.current_device_name() == "openreg:1"
    x = accelerator.FloatTensor([1.0, 2.0])
    assert x.device == torch.device("openreg", 1) and x.dtype == torch.float32
    assert accelerator.on_accelerator(x) and not accelerator.on_accelerator(x.cpu())
    assert accelerator.memory_allocated(1) == torch.openreg.memory_allocated(1) > 0
    free, total = torch.openreg.mem_get_info(1)
    assert accelerator.total_memory(1) == total and accelerator.available_memory(1) == free
    assert accelerator.supported_dtypes() == [torch.float, torch.half, torch.bfloat16]
    pinned = accelerator.pin_memory(torch.arange(4.0))
    assert accelerator.is_pinned(pinned) and torch.equal(pinned, torch.arange(4.0))


def test_generators_streams_events_and_graphs_work_through_the_interface():
    accelerator = OpenRegAccelerator()
    accelerator.manual_seed_all(7)
    state = accelerator.get_rng_state(0)
    drawn = torch.randn(5, device="openreg:0")
    assert torch.equal(drawn.cpu(), torch.randn(5, generator=torch.Generator().manual_seed(7)))
    accelerator.set_rng_state(state, 0)
    assert torch.equal(torch.randn(5, device="openreg:0"), drawn)
    stream = accelerator.Stream(device=0)
    with accelerator.stream(stream):
        assert accelerator.current_stream(0) == stream
        y = torch.ones(3, device="openreg:0") * 2
        event = accelerator.Event()
        event.record()
    accelerator.default_stream(0).wait_event(event)
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))
    static = torch.zeros(3, device="openreg:0")
    graph = accelerator.create_graph()
    with accelerator.capture_to_graph(graph):
        static.add_(1)
    assert torch.equal(static.cpu(), torch.zeros(3))  # captured, not run
    accelerator.replay_graph(graph)
    accelerator.replay_graph(graph)
    accelerator.synchronize(0)
    assert torch.equal(static.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_zero_on_two_ranks_equals_deepspeed_on_the_cpu(tmp_path: pathlib.Path, stage):
    runs = {}
    for device in ("openreg", "cpu"):
        out = str(tmp_path / f"{device}.pt")
        run_script("deepspeed_train.py", out, device, str(stage))
        runs[device] = [torch.load(out), torch.load(f"{out}.rank1")]
    for rank in (0, 1):
        on_openreg, on_cpu = runs["openreg"][rank], runs["cpu"][rank]
        assert on_openreg["engine_device"] == f"openreg:{rank}" and on_cpu["engine_device"] == "cpu"
        assert len(on_openreg["seen"]) == 6 and set(on_openreg["seen"]) == {("openreg", "openreg", True)}
        assert torch.equal(on_openreg["losses"], on_cpu["losses"]), rank
    assert not torch.equal(runs["openreg"][0]["losses"], runs["openreg"][1]["losses"])
    assert_same_tensors(runs["openreg"][0]["params"], runs["cpu"][0]["params"])
