"""Memory history (torch.openreg.memory._record_memory_history, _snapshot, _dump_snapshot): the
snapshot is what PyTorch's memory visualizer (torch.cuda._memory_viz) reads, every event carries
the stack that made it, and its numbers are the allocator's statistics."""

import pickle
from pathlib import Path

import pytest
import torch
from torch.cuda import _memory_viz

from torch_openreg.openreg.debug import timeline, timeline_svg

memory = torch.openreg.memory


@pytest.fixture
def recording():
    torch.openreg.synchronize()
    memory._record_memory_history(stacks="python", clear_history=True)
    yield
    memory._record_memory_history(enabled=None, clear_history=True)


def _make(rows: int) -> torch.Tensor:  # the frame every allocation below must name
    return torch.ones(rows, 256, device="openreg") * 2


def _allocated_blocks(snapshot, device=0):
    return [
        b
        for s in snapshot["segments"]
        if s["device"] == device
        for b in s["blocks"]
        if b["state"] == "active_allocated"
    ]


def test_trace_records_every_allocator_event_with_its_python_stack(recording):
    torch.openreg.empty_cache()
    a = _make(4096)  # 4 MiB: a new 20 MiB segment
    big = torch.empty(24 << 20, dtype=torch.uint8, device="openreg")  # a segment of its own
    big_ptr = big.data_ptr()
    del big
    torch.openreg.empty_cache()
    trace = memory._snapshot()["device_traces"][0]
    actions = [e["action"] for e in trace]
    for action in ("segment_alloc", "alloc", "free_requested", "free_completed", "segment_free"):
        assert action in actions
    alloc_of_a = next(e for e in trace if e["action"] == "alloc" and e["addr"] == a.data_ptr())
    assert alloc_of_a["size"] == 4 << 20
    assert any(f["name"] == "_make" and f["filename"] == __file__ for f in alloc_of_a["frames"])
    freed = [e["action"] for e in trace if e["addr"] == big_ptr]
    assert freed[-3:] == ["free_requested", "free_completed", "segment_free"]
    assert all(e["time_us"] > 0 and e["stream"] != 0 for e in trace)
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)


def test_snapshot_numbers_are_the_allocator_statistics(recording):
    torch.openreg.reset_peak_memory_stats(0)
    kept = [_make(n) for n in (1, 300, 5000)]
    dropped = _make(2000)
    del dropped
    snapshot = memory._snapshot()
    stats = torch.openreg.memory_stats(0)
    blocks = _allocated_blocks(snapshot)
    assert sum(b["size"] for b in blocks) == stats["allocated_bytes.all.current"]
    assert sum(b["requested_size"] for b in blocks) == stats["requested_bytes.all.current"]
    assert sum(s["total_size"] for s in snapshot["segments"] if s["device"] == 0) == stats["reserved_bytes.all.current"]
    # Every tensor kept is a block whose frames name the function that made it.
    by_address = {b["address"]: b for b in blocks}
    for t in kept:
        assert any(f["name"] == "_make" for f in by_address[t.data_ptr()]["frames"])
    # The timeline replays the trace to the same numbers, and to the same peak.
    points = timeline(snapshot, 0)
    assert points[-1].allocated == stats["allocated_bytes.all.current"]
    assert points[-1].reserved == stats["reserved_bytes.all.current"]
    assert max(p.allocated for p in points) == stats["allocated_bytes.all.peak"]


def test_snapshot_loads_in_pytorchs_memory_visualizer(recording, tmp_path):
    kept = _make(3000)  # noqa: F841  (live during the snapshot)
    own_segment = torch.empty(24 << 20, dtype=torch.uint8, device="openreg")  # noqa: F841
    freed = _make(10)
    del freed
    path = tmp_path / "snapshot.pickle"
    memory._dump_snapshot(str(path))
    snapshot = pickle.loads(path.read_bytes())
    summary = _memory_viz.segsum(snapshot)  # checks that blocks add up to their segments
    assert f"segments: {len(snapshot['segments'])}" in summary
    text = _memory_viz.trace(snapshot)
    assert "= cudaMalloc(" in text and "del " in text and "free completed" in text
    assert "test_memory_history.py" in _memory_viz.memory(snapshot, format_flamegraph=lambda lines: lines)
    assert "_make" in _memory_viz.segments(snapshot, format_flamegraph=lambda lines: lines)
    for html in (_memory_viz.trace_plot(snapshot), _memory_viz.segment_plot(snapshot)):
        assert "MemoryViz.js" in html and "snapshot.pickle" in html
    svg = timeline_svg(snapshot, 0)
    assert svg.startswith("<svg") and svg.count("<polyline") == 2


def test_out_of_memory_is_in_the_trace(recording):
    free, _ = torch.openreg.mem_get_info(0)
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(free * 4, dtype=torch.uint8, device="openreg")
    oom = [e for e in memory._snapshot()["device_traces"][0] if e["action"] == "oom"]
    assert len(oom) == 1 and oom[0]["size"] == free * 4 and oom[0]["device_free"] > 0


def test_max_entries_keeps_the_newest_and_state_keeps_no_trace():
    memory._record_memory_history(stacks="python", max_entries=3, clear_history=True)
    try:
        for _ in range(5):
            _make(1)
        trace = memory._snapshot()["device_traces"][0]
        assert len(trace) == 3 and trace[-1]["action"] == "free_completed"
        memory._record_memory_history(enabled="state", stacks="python", clear_history=True)
        kept = _make(7)
        snapshot = memory._snapshot()
        assert snapshot["device_traces"][0] == []
        block = next(b for b in _allocated_blocks(snapshot) if b["address"] == kept.data_ptr())
        assert any(f["name"] == "_make" for f in block["frames"])
    finally:
        memory._record_memory_history(enabled=None, clear_history=True)


def test_cpp_frames_when_asked_for():
    memory._record_memory_history(stacks="all", max_entries=4, clear_history=True)
    try:
        kept = _make(1)  # noqa: F841
        frames = memory._snapshot()["device_traces"][0][-1]["frames"]
        names = [f["name"] for f in frames]
        # The recording frame itself; torch 2.15's symbolizer leaves the allocator's hidden
        # functions below it as "??" (2.13 and 2.14 name them): docs/versions.md.
        assert any("openreg::allocator::" in n for n in names), names
        assert "_make" in names
    finally:
        memory._record_memory_history(enabled=None, clear_history=True)


def test_not_recording_records_nothing_and_bad_arguments_are_refused():
    memory._record_memory_history(enabled=None, clear_history=True)
    _make(5)
    assert memory._snapshot()["device_traces"][0] == []
    with pytest.raises(ValueError, match="stacks must be"):
        memory._record_memory_history(stacks="cpp")
    with pytest.raises(ValueError, match="context='alloc' is not supported"):
        memory._record_memory_history(context="alloc")


def test_each_device_has_its_own_trace(recording):
    on_one = torch.ones(100, device="openreg:1")
    traces = memory._snapshot()["device_traces"]
    assert len(traces) == torch.openreg.device_count()
    assert any(e["action"] == "alloc" and e["addr"] == on_one.data_ptr() for e in traces[1])
    assert not any(e["addr"] == on_one.data_ptr() for e in traces[0])
    assert timeline(memory._snapshot(), 1)[-1].allocated == torch.openreg.memory_allocated(1)


def test_the_wheel_still_lacks_the_header_py_symbolize_needs():
    """Note [py_symbolize declared here] (torch_openreg/csrc/MemorySnapshot.cpp): when this fails,
    include torch/csrc/profiler/python/combined_traceback.h instead of declaring the function."""
    include = Path(torch.__file__).parent / "include"
    assert (include / "torch/csrc/profiler/python/combined_traceback.h").exists()
    assert not (include / "nlohmann/json.hpp").exists()


@pytest.mark.parametrize("name", ["_snapshot", "_dump_snapshot"])
def test_the_memory_history_functions_take_torch_cuda_s_parameters(name):
    # Libraries call these through torch.get_device_module(...).memory with CUDA's keywords, which
    # grow between releases (augment_with_fx_traces): each of torch.cuda's parameters is ours too.
    import inspect

    import torch.cuda.memory

    ours = inspect.signature(getattr(memory, name)).parameters
    theirs = inspect.signature(getattr(torch.cuda.memory, name)).parameters.values()
    missing = [p.name for p in theirs if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ours]
    assert not missing, f"torch.openreg.memory.{name} lacks {missing} of torch.cuda.memory.{name}"


def test_snapshot_augmented_with_fx_traces_keeps_the_segments(recording):
    kept = _make(4)
    plain, augmented = memory._snapshot(), memory._snapshot(augment_with_fx_traces=True)
    assert [s["total_size"] for s in augmented["segments"]] == [s["total_size"] for s in plain["segments"]]
    assert len(_allocated_blocks(augmented)) == len(_allocated_blocks(plain)) >= 1
    del kept
