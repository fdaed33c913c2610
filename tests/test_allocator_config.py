"""The caching allocator as users tune it: PYTORCH_ALLOC_CONF / PYTORCH_OPENREG_ALLOC_CONF (Note
[Allocator configuration]), set_per_process_memory_fraction, garbage collection, MemPool, and
snapshots that account for every reserved byte. Each key's effect is measured in the allocator's
own statistics. Settings are process-wide, so each configuration runs in a fresh interpreter."""

import json
import textwrap
import threading

import pytest
import torch

from conftest import assert_snapshot_is_reserved, run_python

MiB = 1 << 20


def run_json(code: str, env: dict | None = None) -> dict:
    """Runs `code` (which prints one JSON line last) with torch_openreg imported."""
    result = run_python("import json, torch, torch_openreg\nm = torch.openreg.memory\n" + textwrap.dedent(code), env)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def first_allocation_error(env: dict) -> str:
    result = run_python(
        """
        import torch, torch_openreg
        try:
            torch.empty(1, device="openreg")
            print("no error")
        except ValueError as e:
            print("ValueError:", e)
        """,
        env,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip()


@pytest.mark.parametrize(
    "env, words",
    [
        ({"PYTORCH_OPENREG_ALLOC_CONF": "bogus:1"},
         "invalid PYTORCH_OPENREG_ALLOC_CONF='bogus:1': unknown key 'bogus'"),
        ({"PYTORCH_ALLOC_CONF": "max_split_size_mb:abc"},
         ("invalid PYTORCH_ALLOC_CONF='max_split_size_mb:abc': 'max_split_size_mb:abc' is not a valid value; "
          "max_split_size_mb takes a whole number")),
        ({"PYTORCH_OPENREG_ALLOC_CONF": "expandable_segments:yes"}, "expandable_segments takes True or False"),
        ({"PYTORCH_OPENREG_ALLOC_CONF": "backend:cudaMallocAsync"}, "(it configures CUDA's allocator only)"),
        ({"PYTORCH_OPENREG_ALLOC_CONF": "roundup_power2_divisions:[3:4]"},
         ("PYTORCH_OPENREG_ALLOC_CONF='roundup_power2_divisions:[3:4]': "
          "'roundup_power2_divisions:[3:4]' is not a valid value")),
        ({"PYTORCH_OPENREG_ALLOC_CONF": "max_non_split_rounding_mb:1"},
         ("PYTORCH_OPENREG_ALLOC_CONF='max_non_split_rounding_mb:1': "
          "CachingAllocator option max_non_split_rounding_mb too small")),
    ],
    ids=["unknown_key", "not_a_number", "not_a_bool", "cuda_only_key_in_own", "not_power_of_2", "c10_range"],
)
def test_a_bad_setting_is_a_clear_error_at_the_first_allocation(env, words):
    error = first_allocation_error(env)
    assert error.startswith("ValueError: ") and words in error


def test_the_devices_own_variable_wins_and_cudas_keys_in_the_shared_one_are_left_to_cuda():
    got = run_json(
        """
        torch.empty(1, device="openreg")
        print(json.dumps({"ours": m._get_allocator_settings(), "c10": torch._C._accelerator_getAllocatorSettings()}))
        """,
        {"PYTORCH_ALLOC_CONF": "backend:native,max_split_size_mb:100,garbage_collection_threshold:0.5",
         "PYTORCH_OPENREG_ALLOC_CONF": "max_split_size_mb:200"},
    )
    assert got["ours"] == "garbage_collection_threshold:0.5,max_split_size_mb:200"
    assert got["c10"] == got["ours"]  # what the host allocator and torch.accelerator read


def test_set_allocator_settings_changes_only_the_keys_it_names():
    got = run_json(
        """
        m._set_allocator_settings("max_split_size_mb:64")
        m._set_allocator_settings("roundup_power2_divisions:4")
        print(json.dumps(m._get_allocator_settings()))
        """
    )
    assert got == "max_split_size_mb:64,roundup_power2_divisions:4"


# Each program frees a 100 MiB tensor, then asks for 30 MiB: split from the cached block, or not.
MAX_SPLIT = """
x = torch.empty(100 * 2**20, dtype=torch.uint8, device="openreg"); del x
before = m.memory_stats()["num_device_alloc"]
y = torch.empty(30 * 2**20, dtype=torch.uint8, device="openreg")
s = m.memory_stats()
print(json.dumps({"new_segments": s["num_device_alloc"] - before, "oversize_segments": s["oversize_segments.current"],
                  "oversize_allocations": s["oversize_allocations.current"], "max_split_size": s["max_split_size"],
                  "reserved": m.memory_reserved(), "snapshot": sum(x["total_size"] for x in m.memory_snapshot())}))
"""


def test_max_split_size_keeps_large_blocks_whole():
    split = run_json(MAX_SPLIT)
    whole = run_json(MAX_SPLIT, {"PYTORCH_OPENREG_ALLOC_CONF": "max_split_size_mb:64"})
    assert split["new_segments"] == 0 and split["oversize_segments"] == 0
    assert whole["new_segments"] == 1 and whole["oversize_segments"] == 1
    # As CUDA reports them: the setting in bytes (-1 when unset), and the oversize blocks in use
    # (the 30 MiB block is under the 64 MiB limit; the cached 100 MiB segment is not in use).
    assert (split["max_split_size"], whole["max_split_size"]) == (-1, 64 * MiB)
    assert (split["oversize_allocations"], whole["oversize_allocations"]) == (0, 0)
    assert whole["reserved"] == split["reserved"] + 30 * MiB
    assert whole["snapshot"] == whole["reserved"] and split["snapshot"] == split["reserved"]


def test_oversize_statistics_count_blocks_and_segments_of_max_split_size_as_cudas_do():
    got = run_json(
        """
        M = 2**20
        def oversize():
            s = m.memory_stats()
            return {k: [s[f"{k}.{f}"] for f in ("current", "peak", "allocated", "freed")]
                    for k in ("oversize_allocations", "oversize_segments")}
        x = torch.empty(100 * M, dtype=torch.uint8, device="openreg")  # an oversize segment and block
        y = torch.empty(30 * M, dtype=torch.uint8, device="openreg")  # neither
        z = torch.empty(80 * M, dtype=torch.uint8, device="openreg")  # both
        steps = [oversize()]
        del x  # its segment stays cached
        steps.append(oversize())
        w = torch.empty(90 * M, dtype=torch.uint8, device="openreg")  # x's 100 MiB block, whole
        steps.append(oversize())
        del w, z
        torch.openreg.empty_cache()
        steps.append(oversize())
        torch.openreg.reset_peak_memory_stats()
        steps.append(oversize())
        torch.openreg.reset_accumulated_memory_stats()
        steps.append(oversize())
        print(json.dumps(steps))
        """,
        {"PYTORCH_ALLOC_CONF": "max_split_size_mb:64"},
    )
    # [current, peak, allocated, freed]; reset_peak_memory_stats and reset_accumulated_memory_stats
    # reset them as every other statistic, as CUDA's do.
    assert got == [
        {"oversize_allocations": [2, 2, 2, 0], "oversize_segments": [2, 2, 2, 0]},
        {"oversize_allocations": [1, 2, 2, 1], "oversize_segments": [2, 2, 2, 0]},
        {"oversize_allocations": [2, 2, 3, 1], "oversize_segments": [2, 2, 2, 0]},
        {"oversize_allocations": [0, 2, 3, 3], "oversize_segments": [0, 2, 2, 2]},
        {"oversize_allocations": [0, 0, 3, 3], "oversize_segments": [0, 0, 2, 2]},
        {"oversize_allocations": [0, 0, 0, 0], "oversize_segments": [0, 0, 0, 0]},
    ]


def test_max_non_split_rounding_lets_a_large_block_serve_a_request_close_to_its_size():
    code = """
    x = torch.empty(100 * 2**20, dtype=torch.uint8, device="openreg"); del x
    before = m.memory_stats()["num_device_alloc"]
    y = torch.empty(70 * 2**20, dtype=torch.uint8, device="openreg")
    print(json.dumps(m.memory_stats()["num_device_alloc"] - before))
    """
    # 100 MiB >= 70 + 20: a new segment; 100 < 70 + 40: the cached block serves it whole.
    assert run_json(code, {"PYTORCH_OPENREG_ALLOC_CONF": "max_split_size_mb:64"}) == 1
    assert run_json(code, {"PYTORCH_OPENREG_ALLOC_CONF": "max_split_size_mb:64,max_non_split_rounding_mb:40"}) == 0


def test_large_segment_size_sets_the_segment_of_mid_sized_requests():
    code = """
    t = torch.empty(5 * 2**20, dtype=torch.uint8, device="openreg")
    print(json.dumps(m.memory_stats()["reserved_bytes.large_pool.current"] // 2**20))
    """
    assert run_json(code) == 20
    assert run_json(code, {"PYTORCH_OPENREG_ALLOC_CONF": "large_segment_size_mb:40"}) == 40


def test_roundup_power2_divisions_rounds_requests_to_a_few_sizes():
    code = """
    t = torch.empty(1_100_000, dtype=torch.uint8, device="openreg")
    s = m.memory_stats()
    print(json.dumps([s["requested_bytes.all.current"], s["allocated_bytes.all.current"]]))
    """
    assert run_json(code) == [1_100_000, 1_100_288]  # 512-byte granules
    assert run_json(code, {"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:4"}) == [1_100_000, 1_310_720]  # 1.25 MiB
    assert run_json(code, {"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:[1:4,>:2]"}) == [1_100_000, 1_310_720]
    assert run_json(code, {"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:[1:2,>:4]"}) == [1_100_000, 1_572_864]


# Three 100 MiB tensors freed, then 150 MiB asked for, under an allowance of 400 MiB.
GC = """
total = m.mem_get_info()[1]
m.set_per_process_memory_fraction(400 * 2**20 / total)
xs = [torch.empty(100 * 2**20, dtype=torch.uint8, device="openreg") for _ in range(3)]
del xs
y = torch.empty(150 * 2**20, dtype=torch.uint8, device="openreg")
s = m.memory_stats()
print(json.dumps({"reserved": m.memory_reserved() // 2**20, "device_frees": s["num_device_free"],
                  "retries": s["num_alloc_retries"]}))
"""


def test_garbage_collection_sheds_the_oldest_free_segments_before_the_allowance_is_reached():
    # Without it: the allowance is hit, the whole cache is returned and the allocation retried.
    assert run_json(GC) == {"reserved": 150, "device_frees": 3, "retries": 1}
    # With it: 300 MiB cached > 0.5 x 400 MiB, so one free segment goes (the oldest), no retry.
    assert run_json(GC, {"PYTORCH_OPENREG_ALLOC_CONF": "garbage_collection_threshold:0.5"}) == {
        "reserved": 350, "device_frees": 1, "retries": 0}


def test_the_memory_fraction_caps_the_cache_and_the_error_says_so():
    got = run_json(
        """
        m.set_per_process_memory_fraction(0.01)
        try:
            torch.empty(m.mem_get_info()[1] // 50, dtype=torch.uint8, device="openreg")
            error = None
        except torch.OutOfMemoryError as e:
            error = str(e)
        small = torch.ones(1000, device="openreg").sum().item()
        try:
            m.set_per_process_memory_fraction(1.5)
        except ValueError as e:
            bad = str(e)
        print(json.dumps({"fraction": m.get_per_process_memory_fraction(), "error": error, "small": small, "bad": bad}))
        """
    )
    assert got["fraction"] == 0.01 and got["small"] == 1000.0
    assert "this process is allowed" in got["error"] and "set_per_process_memory_fraction" in got["error"]
    assert "(openreg: aten::empty" in got["error"]
    assert got["bad"].startswith("openreg: invalid memory fraction 1.5")


def test_the_out_of_memory_message_names_fragmentation_and_the_setting_to_try():
    # 9 MiB tensors two to a 20 MiB segment until the device is full; every second one freed
    # leaves 11 MiB free in each segment, none of which can go back to the device.
    got = run_json(
        """
        tensors = []
        while True:
            try:
                tensors.append(torch.empty(9 * 2**20, dtype=torch.uint8, device="openreg"))
            except torch.OutOfMemoryError:
                break
        del tensors[1::2]
        try:
            torch.empty(16 * 2**20, dtype=torch.uint8, device="openreg")
            print(json.dumps(None))
        except torch.OutOfMemoryError as e:
            print(json.dumps(str(e)))
        """,
        {"OPENREG_DEVICE_MEMORY": "512M"},
    )
    assert got is not None
    assert "Tried to allocate 16.00 MiB" in got and "its largest free block is 11.00 MiB" in got
    assert "PYTORCH_OPENREG_ALLOC_CONF=expandable_segments:True" in got


def test_a_mem_pool_serves_the_threads_that_use_it_and_its_memory_goes_back():
    memory = torch.openreg.memory
    pool = memory.MemPool()
    assert pool.use_count() == 1 and pool.allocator is None
    elsewhere = []
    with memory.use_mem_pool(pool):
        assert pool.use_count() == 2
        a = torch.ones(1000, device="openreg")
        worker = threading.Thread(target=lambda: elsewhere.append(torch.ones(1000, device="openreg")))
        worker.start()
        worker.join()
    assert pool.use_count() == 1
    pooled = {s["address"] for s in pool.snapshot()}
    assert len(pooled) == 1 and all(s["segment_pool_id"] == pool.id for s in pool.snapshot())
    shared = {s["address"] for s in torch.openreg.memory_snapshot() if tuple(s["segment_pool_id"]) == (0, 0)}
    address = a.data_ptr()
    assert any(p <= address < p + 2 * MiB for p in pooled)
    assert not any(p <= elsewhere[0].data_ptr() < p + 2 * MiB for p in pooled) and shared
    del a
    with memory.use_mem_pool(pool):
        b = torch.zeros(1000, device="openreg")
    assert b.data_ptr() == address  # the pool's freed block, reused by the pool
    assert torch.equal(b.cpu(), torch.zeros(1000))
    reserved = torch.openreg.memory_reserved()
    del b, pool
    torch.openreg.empty_cache()
    assert torch.openreg.memory_reserved() <= reserved - 2 * MiB
    assert_snapshot_is_reserved()


def test_a_graph_captured_into_a_mem_pool_shares_it():
    memory = torch.openreg.memory
    pool = memory.MemPool()
    x = torch.ones(1000, device="openreg")
    graph = torch.openreg.Graph()
    with torch.openreg.graph(graph, pool=pool.id):
        y = x * 2
    assert pool.use_count() == 2  # the MemPool and the graph
    assert any(s["address"] <= y.data_ptr() < s["address"] + s["total_size"] for s in pool.snapshot())
    graph.replay()
    assert torch.equal(y.cpu(), torch.full((1000,), 2.0))
    assert_snapshot_is_reserved()
    del graph
    assert pool.use_count() == 1


def test_a_snapshot_accounts_for_a_graph_pool_whose_first_block_is_free():
    x = torch.ones(1000, device="openreg")
    graph = torch.openreg.Graph()
    with torch.openreg.graph(graph):
        t = x * 2
        u = t + 1  # noqa: F841
        del t
    segments = assert_snapshot_is_reserved()
    assert any(s["blocks"][0]["state"] == "inactive" and s["segment_pool_id"] != (0, 0) for s in segments)
    del graph


EXPANDABLE = {"PYTORCH_OPENREG_ALLOC_CONF": "expandable_segments:True"}


def test_an_expandable_segment_grows_in_place_and_shrinks_on_empty_cache():
    got = run_json(
        """
        a = torch.full((30 * 2**18,), 1.0, device="openreg")  # 30 MiB
        b = torch.full((50 * 2**18,), 2.0, device="openreg")  # 50 MiB, right after a
        segments = [s for s in m.memory_snapshot() if s["segment_type"] == "large"]
        grown = {"segments": len(segments), "expandable": all(s["is_expandable"] for s in segments),
                 "contiguous": b.data_ptr() == a.data_ptr() + 30 * 2**20,
                 "reserved": m.memory_reserved() // 2**20,
                 "snapshot": sum(s["total_size"] for s in m.memory_snapshot()) == m.memory_reserved(),
                 "values": (a.sum() + b.sum()).item()}
        del b
        c = torch.full((10 * 2**18,), 3.0, device="openreg")  # from b's freed block: no growth
        calls = m.memory_stats()["num_device_alloc"]
        del a, c
        torch.openreg.empty_cache()
        print(json.dumps({**grown, "device_allocs": calls, "after_empty_cache": m.memory_reserved(),
                          "device_frees": m.memory_stats()["num_device_free"]}))
        """,
        EXPANDABLE,
    )
    # Device calls: two maps and the small pool's segment (for the sums); one unmap and its free.
    assert got == {"segments": 1, "expandable": True, "contiguous": True, "reserved": 80, "snapshot": True,
                   "values": 30 * 2**18 + 2 * 50 * 2**18, "device_allocs": 3, "after_empty_cache": 0,
                   "device_frees": 2}


# Three blocks in the expandable segment: a (3 MiB), a 20 MiB hole, b (3 MiB). Each request maps the
# granules (2 MiB) it lacks: a maps 4 MiB, the hole 20 more (with a's free last 1 MiB), b 2 more.
HOLE = """
M = 2**20
def large():
    s = m.memory_stats()
    segments = [x for x in m.memory_snapshot() if x["segment_type"] == "large"]
    return {"reserved": s["reserved_bytes.large_pool.current"] // M, "segments": s["segment.large_pool.current"],
            "listed": len(segments), "expandable": all(x["is_expandable"] for x in segments),
            "snapshot": sum(x["total_size"] for x in m.memory_snapshot()) == m.memory_reserved(),
            "maps": s["num_device_alloc"], "unmaps": s["num_device_free"]}
a_cpu, b_cpu = torch.randn(3 * M // 4), torch.randn(3 * M // 4)
a = a_cpu.to("openreg")
hole = torch.empty(20 * M, dtype=torch.uint8, device="openreg")
b = b_cpu.to("openreg")
at = {"hole": hole.data_ptr() - a.data_ptr(), "b": b.data_ptr() - a.data_ptr()}
full = large()
free_full = m.mem_get_info()[0]
del hole
torch.openreg.empty_cache()
free_emptied = m.mem_get_info()[0]
emptied = large()
torch.openreg.empty_cache()  # nothing more to give back
again = large()
"""


def test_empty_cache_unmaps_a_free_hole_between_live_blocks_and_a_request_reuses_it():
    got = run_json(
        HOLE
        + textwrap.dedent(
            """
        intact = torch.equal(a.cpu(), a_cpu) and torch.equal(b.cpu(), b_cpu)
        c_cpu = torch.randn(5 * M)  # 20 MiB: its free neighbours' 2 MiB and the 18 unmapped
        c = c_cpu.to("openreg")
        refilled = large()
        print(json.dumps({"at": at, "full": full, "emptied": emptied, "again": again, "intact": intact,
                          "freed": (free_emptied - free_full) // M, "reused": c.data_ptr() - a.data_ptr(),
                          "refilled": refilled, "taken": (free_emptied - m.mem_get_info()[0]) // M,
                          "all_intact": torch.equal(a.cpu(), a_cpu) and torch.equal(b.cpu(), b_cpu)
                          and torch.equal(c.cpu(), c_cpu)}))
        """
        ),
        EXPANDABLE,
    )
    M = 2**20
    assert got["at"] == {"hole": 3 * M, "b": 23 * M}
    assert got["full"] == {"reserved": 26, "segments": 1, "listed": 1, "expandable": True, "snapshot": True,
                           "maps": 3, "unmaps": 0}
    # The hole's whole granules, [4, 22) MiB, go back; a's last granule and b's first stay mapped, so
    # the segment is two mapped ranges, listed as two segments.
    assert got["emptied"] == {"reserved": 8, "segments": 2, "listed": 2, "expandable": True, "snapshot": True,
                              "maps": 3, "unmaps": 1}
    assert got["again"] == got["emptied"] and got["freed"] == 18
    assert got["intact"] and got["all_intact"]
    # The 20 MiB request takes the hole back (its free 1 MiB ends and its 18 unmapped MiB), mapping
    # only those 18 MiB, at the hole's address: the device's free memory agrees.
    assert got["reused"] == 3 * M and got["taken"] == 18
    assert got["refilled"] == {"reserved": 26, "segments": 1, "listed": 1, "expandable": True, "snapshot": True,
                               "maps": 4, "unmaps": 1}


def test_a_request_larger_than_an_unmapped_hole_grows_the_segment_at_its_end():
    got = run_json(
        HOLE
        + textwrap.dedent(
            """
        c = torch.empty(30 * M, dtype=torch.uint8, device="openreg")  # more than the hole: after b
        grown = large()
        d = torch.empty(10 * M, dtype=torch.uint8, device="openreg")  # fits the hole, at its lowest address
        print(json.dumps({"c": c.data_ptr() - a.data_ptr(), "grown": grown, "d": d.data_ptr() - a.data_ptr(),
                          "filled": large(), "intact": torch.equal(a.cpu(), a_cpu) and torch.equal(b.cpu(), b_cpu)}))
        """
        ),
        EXPANDABLE,
    )
    M = 2**20
    # c: mapped past b, where the reservation's unmapped rest begins; it joins b's mapped range.
    assert got["c"] == 26 * M
    assert got["grown"] == {"reserved": 38, "segments": 2, "listed": 2, "expandable": True, "snapshot": True,
                            "maps": 4, "unmaps": 1}
    # d: from a's free last 1 MiB and the hole's first 10 MiB (5 granules), joining nothing past it.
    assert got["d"] == 3 * M
    assert got["filled"] == {"reserved": 48, "segments": 2, "listed": 2, "expandable": True, "snapshot": True,
                             "maps": 5, "unmaps": 1}
    assert got["intact"]


def test_expandable_segment_statistics_follow_a_random_workload():
    got = run_json(
        """
        import random
        M = 2**20
        rng = random.Random(0)
        live = {}  # name: (device tensor, CPU copy)
        checks = []
        for step in range(120):
            op = rng.random()
            if op < 0.55 or not live:
                n = rng.randint(M // 4 + 1, 12 * M)  # floats: 1 to 48 MiB
                cpu = torch.randn(n // 4, generator=torch.Generator().manual_seed(step))
                live[step] = (cpu.to("openreg"), cpu)
            elif op < 0.9:
                del live[rng.choice(list(live))]
            else:
                free_before, total = m.mem_get_info()
                reserved_before = m.memory_reserved()
                torch.openreg.empty_cache()
                s = m.memory_stats()
                large = [x for x in m.memory_snapshot() if x["segment_type"] == "large"]
                checks.append({
                    "given_back": m.mem_get_info()[0] - free_before == reserved_before - m.memory_reserved(),
                    "snapshot": sum(x["total_size"] for x in m.memory_snapshot()) == m.memory_reserved(),
                    "segments": s["segment.large_pool.current"] == len(large),
                    "allocated": sum(x["allocated_size"] for x in large) == s["allocated_bytes.large_pool.current"],
                    "intact": all(torch.equal(t.cpu(), c) for t, c in live.values()),
                })
        print(json.dumps({"checks": len(checks), "failed": [c for c in checks if not all(c.values())],
                          "unmaps": m.memory_stats()["num_device_free"]}))
        """,
        EXPANDABLE,
    )
    assert got["checks"] >= 5 and got["failed"] == [] and got["unmaps"] >= 5


def test_a_stream_past_the_address_space_keeps_fixed_segments():
    got = run_json(
        """
        streams = [torch.openreg.Stream() for _ in range(4)]
        held = []
        for i, s in enumerate(streams):
            with torch.openreg.stream(s):
                held.append(torch.full((2**20,), float(i), device="openreg"))  # 4 MiB each
        torch.openreg.synchronize()
        large = [x for x in m.memory_snapshot() if x["segment_type"] == "large"]
        print(json.dumps({"expandable": sorted(x["is_expandable"] for x in large),
                          "sizes": sorted(x["total_size"] // 2**20 for x in large),
                          "values": [t[0].item() for t in held],
                          "snapshot": sum(x["total_size"] for x in m.memory_snapshot()) == m.memory_reserved()}))
        """,
        {**EXPANDABLE, "OPENREG_DEVICE_MEMORY": "256M"},
    )
    # Three segments of twice the capacity fill the 7 capacities of reservations; the fourth stream
    # takes a fixed 20 MiB segment (large_segment_size_mb) instead of failing.
    assert got == {"expandable": [False, True, True, True], "sizes": [4, 4, 4, 20], "values": [0.0, 1.0, 2.0, 3.0],
                   "snapshot": True}


# Sizes that change every step, as sequence lengths do; each step frees the last one's tensors.
VARIABLE = """
import random
random.seed(0)
keep = []
for step in range(60):
    n = random.randint(10, 60)
    keep = [torch.empty(size * 2**20, dtype=torch.uint8, device="openreg") for size in (n, 70 - n)]
s = m.memory_stats()
print(json.dumps({"peak_reserved": s["reserved_bytes.all.peak"] // 2**20,
                  "peak_requested": s["requested_bytes.all.peak"] // 2**20,
                  "snapshot": sum(x["total_size"] for x in m.memory_snapshot()) == m.memory_reserved()}))
"""


def test_expandable_segments_stop_variable_sizes_from_fragmenting():
    fixed = run_json(VARIABLE)
    expandable = run_json(VARIABLE, EXPANDABLE)
    assert fixed["snapshot"] and expandable["snapshot"]
    assert fixed["peak_requested"] == expandable["peak_requested"] == 140  # two steps' tensors at once
    assert expandable["peak_reserved"] <= 142 < fixed["peak_reserved"]


def test_an_expandable_segment_out_of_memory_leaves_the_device_working():
    got = run_json(
        """
        held = []
        try:
            while True:
                held.append(torch.ones(16 * 2**18, device="openreg"))  # 16 MiB each
        except torch.OutOfMemoryError as e:
            error = str(e)
        count = len(held)
        held.pop()  # room for the sums' small results
        total = sum(t.sum().item() for t in held) + 16 * 2**18
        del held
        again = torch.ones(100 * 2**18, device="openreg").sum().item()
        print(json.dumps({"count": count, "error": error[:70], "right": total == count * 16 * 2**18,
                          "again": again, "ooms": m.memory_stats()["num_ooms"]}))
        """,
        {**EXPANDABLE, "OPENREG_DEVICE_MEMORY": "256M"},
    )
    assert got["count"] == 16 and got["right"] and got["again"] == 100 * 2**18 and got["ooms"] == 1
    assert got["error"].startswith("openreg out of memory on device 0. Tried to allocate 16.00 MiB")


def test_an_expandable_segment_reads_in_pytorchs_memory_visualizer():
    got = run_json(
        """
        import pickle, tempfile
        from torch.cuda import _memory_viz
        m._record_memory_history(max_entries=1000)
        a = torch.ones(30 * 2**18, device="openreg")
        b = torch.ones(50 * 2**18, device="openreg")
        del b
        torch.openreg.empty_cache()
        path = tempfile.mktemp(suffix=".pickle")
        m._dump_snapshot(path)
        snapshot = pickle.loads(open(path, "rb").read())
        actions = [e["action"] for e in snapshot["device_traces"][0]]
        summary = _memory_viz.segsum(snapshot)
        html = _memory_viz.segment_plot(snapshot) + _memory_viz.trace_plot(snapshot)
        large = [s for s in snapshot["segments"] if s["segment_type"] == "large"]
        print(json.dumps({"maps": actions.count("segment_map"), "unmaps": actions.count("segment_unmap"),
                          "expandable": [s["is_expandable"] for s in large],
                          "sum": sum(s["total_size"] for s in snapshot["segments"]) == m.memory_reserved(),
                          "summary": "segments:" in summary, "html": "MemoryViz.js" in html}))
        """,
        EXPANDABLE,
    )
    assert got == {"maps": 2, "unmaps": 1, "expandable": [True], "sum": True, "summary": True, "html": True}
