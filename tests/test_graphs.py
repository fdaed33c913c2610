"""Graphs on openreg (docs/graphs.md): capture a stream's work once, replay it with one launch.
CPU is the oracle: replays equal the same steps run eagerly, on openreg and on the CPU."""

import gc

import pytest
import torch
import torch.nn.functional as F
from torch import nn

openreg = torch.openreg
DEV = "openreg"


def mlp(device):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)


def batches(n):
    g = torch.Generator().manual_seed(3)
    return [(torch.randn(16, 128, generator=g), torch.randint(0, 10, (16,), generator=g)) for _ in range(n)]


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss


def eager_run(device, data, warmup):
    model = mlp(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for x, y in warmup + data:
        losses.append(train_step(model, opt, x.to(device), y.to(device)).detach().to("cpu"))
    return model, losses[len(warmup) :]


def test_captured_training_step_replayed_equals_eager_on_openreg_and_cpu():
    warmup, data = batches(3), batches(6)[3:]
    model = mlp(DEV)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    static_x = torch.zeros(16, 128, device=DEV)
    static_y = torch.zeros(16, dtype=torch.long, device=DEV)
    side = openreg.Stream()
    side.wait_stream(openreg.current_stream())
    with openreg.stream(side):
        for x, y in warmup:  # warm up on a side stream, as with CUDA graphs
            static_x.copy_(x)
            static_y.copy_(y)
            train_step(model, opt, static_x, static_y)
    openreg.current_stream().wait_stream(side)
    g = openreg.Graph()
    opt.zero_grad(set_to_none=True)
    with openreg.graph(g):
        static_loss = F.cross_entropy(model(static_x), static_y)
        static_loss.backward()
        opt.step()
    losses = []
    for x, y in data:
        static_x.copy_(x)
        static_y.copy_(y)
        g.replay()
        losses.append(static_loss.detach().to("cpu"))
    eager_openreg, eager_losses = eager_run(DEV, data, warmup)
    eager_cpu, cpu_losses = eager_run("cpu", data, warmup)
    for replayed, on_device, on_cpu in zip(
        model.parameters(), eager_openreg.parameters(), eager_cpu.parameters(), strict=True
    ):
        assert replayed.device.type == DEV and replayed.dtype == torch.float32
        assert torch.equal(replayed.detach().cpu(), on_device.detach().cpu())
        assert torch.equal(replayed.detach().cpu(), on_cpu.detach())
    assert [torch.equal(a, b) for a, b in zip(losses, eager_losses, strict=True)] == [True] * 3
    assert [torch.equal(a, b) for a, b in zip(losses, cpu_losses, strict=True)] == [True] * 3
    assert len({float(loss) for loss in losses}) == 3  # each replay trained on its own batch


def test_accelerator_graph_with_keep_graph_instantiates_on_first_replay():
    x = torch.arange(6.0, device=DEV)
    s = torch.Stream(device=DEV)
    g = torch.accelerator.Graph(keep_graph=True)
    with s, g:
        x.mul_(2).add_(1)
    assert torch.equal(x.cpu(), torch.arange(6.0))  # captured, not run
    g.replay()  # instantiates
    g.replay()
    assert torch.equal(x.cpu(), (torch.arange(6.0) * 2 + 1) * 2 + 1)
    g.instantiate()  # again: allowed while the graph is kept
    g.replay()
    assert torch.equal(x.cpu(), ((torch.arange(6.0) * 2 + 1) * 2 + 1) * 2 + 1)


def test_replay_is_ordered_with_other_work_on_the_current_stream():
    x = torch.ones(4, device=DEV)
    g = openreg.Graph()
    with openreg.graph(g):
        x.mul_(3)
    for _ in range(3):
        x.add_(1)  # eager, on the default stream
        g.replay()  # on the current stream: after the add, before the next
    assert torch.equal(x.cpu(), torch.tensor([((1 + 1) * 3 + 1) * 3 + 1] * 4, dtype=torch.float) * 3)


def test_random_numbers_are_new_on_each_replay_and_equal_eager_after_manual_seed():
    x = torch.ones(1000, device=DEV)
    g = openreg.Graph()
    with openreg.graph(g):
        noise = torch.randn(8, device=DEV)
        dropped = F.dropout(x, 0.5)
    openreg.manual_seed(123)
    draws = []
    for _ in range(3):
        g.replay()
        draws.append((noise.cpu(), dropped.cpu()))
    assert not torch.equal(draws[0][0], draws[1][0])
    assert not torch.equal(draws[0][1], draws[1][1])
    torch.manual_seed(123)
    for n, d in draws:
        assert torch.equal(n, torch.randn(8))
        assert torch.equal(d, F.dropout(torch.ones(1000), 0.5))
    openreg.manual_seed(123)  # the same seed again: the same draws, once the replays have run
    g.replay()
    assert torch.equal(noise.cpu(), draws[0][0])


def test_graph_pool_handle_shares_one_pool_and_statistics_count_it():
    x = torch.ones(64, device=DEV)
    openreg.empty_cache()  # as each capture below does first
    base = openreg.memory_stats()
    reserved = openreg.memory_reserved()
    pool = openreg.graph_pool_handle()
    assert pool[0] == 0 and pool[1] > 0
    g1, g2 = openreg.Graph(), openreg.Graph()
    with openreg.graph(g1, pool=pool):
        y1 = x * 2
    with openreg.graph(g2, pool=pool):
        y2 = y1 + 1
    assert g1.pool() == pool and g2.pool() == pool
    stats = openreg.memory_stats()
    grown = openreg.memory_reserved() - reserved
    assert grown == 2 << 20  # one small segment, shared by both graphs
    assert stats["segment.all.current"] == base["segment.all.current"] + 1
    key = f"reserved_bytes_by_private_pools.{pool[0]}_{pool[1]}.all.current"
    assert stats[key] == 2 << 20
    openreg.empty_cache()  # never releases a live graph's pool
    assert openreg.memory_reserved() - reserved == 2 << 20
    g1.replay()
    g2.replay()
    assert torch.equal(y2.cpu(), torch.full((64,), 3.0))
    x.fill_(5)
    g1.replay()
    g2.replay()
    assert torch.equal(y2.cpu(), torch.full((64,), 11.0))  # valid across replays
    del y1, y2
    g1.reset()
    assert openreg.memory_reserved() - reserved == 2 << 20  # g2 still holds the pool
    del g2
    gc.collect()
    assert openreg.memory_reserved() == reserved  # the graph's death released it
    stats = openreg.memory_stats()
    assert stats[key] == 0 and stats[key.replace("current", "peak")] == 2 << 20


def test_outputs_alive_after_reset_are_released_by_empty_cache():
    x = torch.ones(8, device=DEV)
    openreg.empty_cache()
    reserved = openreg.memory_reserved()
    g = openreg.Graph()
    with openreg.graph(g):
        y = x + 1
    g.replay()
    g.reset()  # y still holds its block: the segment stays until y goes
    assert openreg.memory_reserved() > reserved
    assert torch.equal(y.cpu(), torch.full((8,), 2.0))
    del y
    openreg.empty_cache()
    assert openreg.memory_reserved() == reserved


def _check_device_usable():
    assert not openreg.is_current_stream_capturing()
    assert torch.ones(3, device=DEV).sum().item() == 3.0
    openreg.synchronize()


@pytest.mark.parametrize(
    "what, body, reason",
    [
        ("item", lambda x: x.sum().item(), "must complete"),
        ("nonzero", lambda x: torch.nonzero(x), "capturing a graph"),
        ("print", lambda x: str(x), "capturing a graph"),
        ("pageable copy", lambda x: x.to("cpu"), "pageable"),
        ("synchronize", lambda x: openreg.synchronize(), "orDeviceSynchronize"),
    ],
)
def test_what_cannot_be_captured_raises_and_leaves_the_device_usable(what, body, reason):
    x = torch.ones(4, device=DEV)
    g = openreg.Graph()
    with pytest.raises(RuntimeError, match="invalidated") as info:
        with openreg.graph(g):
            body(x)
    chain = f"{info.value}\n{info.value.__context__}"
    assert reason in chain, chain
    _check_device_usable()


def test_allocation_outside_the_pool_raises_under_strict_modes_only():
    # A high-priority stream: pool streams are handed out round robin, and a normal one could be
    # the graphs' default capture stream itself, depending on how many streams earlier tests took.
    other = openreg.Stream(priority=-1)

    def allocate_on_other_stream(mode):
        with openreg.graph(openreg.Graph(), capture_error_mode=mode), openreg.stream(other):
            torch.empty(16, device=DEV)

    # The stream is named by its device and number, not by its 64-bit id.
    named = f"on openreg:{other.device_index} stream {other.stream_id >> 32}, which is not capturing"
    for mode in ("global", "thread_local"):
        with pytest.raises(RuntimeError, match=named):
            allocate_on_other_stream(mode)
        _check_device_usable()
    g = openreg.Graph()
    with openreg.graph(g, capture_error_mode="relaxed"):
        with openreg.stream(other):
            outside = torch.empty(16, device=DEV)
    assert outside.device.type == DEV
    openreg.synchronize()  # relaxed also allows synchronizing during capture
    _check_device_usable()


def test_is_current_stream_capturing_and_forked_streams():
    x = torch.ones(4, device=DEV)
    side = openreg.Stream()
    g = openreg.Graph()
    assert not openreg.is_current_stream_capturing()
    with openreg.graph(g):
        assert openreg.is_current_stream_capturing()
        side.wait_stream(openreg.current_stream())  # forks side off the capture
        with openreg.stream(side):
            assert openreg.is_current_stream_capturing()
            y = x * 5
        openreg.current_stream().wait_stream(side)  # joins it back
        z = y + 1
    assert not openreg.is_current_stream_capturing()
    g.replay()
    assert torch.equal(z.cpu(), torch.full((4,), 6.0))


def test_debug_dump_describes_tasks_streams_and_memory(tmp_path):
    x = torch.ones(4, device=DEV)
    g = openreg.Graph()
    g.enable_debug_mode()
    with openreg.graph(g):
        y = x * 2 + 1
    path = tmp_path / "graph.dot"
    g.debug_dump(str(path))
    text = path.read_text()
    assert text.startswith("digraph")
    assert "task 0: aten::mul" in text and "task 1: aten::add" in text and "stream 0" in text
    assert "writes 0x" in text
    g.replay()
    assert torch.equal(y.cpu(), torch.full((4,), 3.0))
    plain = openreg.Graph()
    with openreg.graph(plain):
        x.add_(1)
    with pytest.raises(RuntimeError, match="enable_debug_mode"):
        plain.debug_dump(str(path))


def test_graph_misuse_raises_clearly():
    g = openreg.Graph()
    with pytest.raises(RuntimeError, match="needs a captured graph"):
        g.replay()
    with pytest.raises(RuntimeError, match="without a capture_begin"):
        g.capture_end()
    x = torch.ones(2, device=DEV)
    with openreg.graph(g):
        x.add_(1)
    with pytest.raises(RuntimeError, match="already holds a capture"):
        g.capture_begin()
    g.reset()
    with openreg.graph(g):  # reusable after reset()
        x.add_(2)
    g.replay()
    assert torch.equal(x.cpu(), torch.full((2,), 3.0))


def test_a_compiled_function_is_captured_and_replayed():
    f = torch.compile(lambda x, w: torch.relu(x @ w) * 2 + 1, backend="aot_eager")
    x = torch.randn(8, 8, device=DEV)
    w = torch.randn(8, 8, device=DEV)
    f(x, w)  # compiled before the capture, as its warm-up
    g = openreg.Graph()
    with openreg.graph(g):
        y = f(x, w)
    x.copy_(torch.ones(8, 8))
    g.replay()
    assert torch.equal(y.cpu(), torch.relu(torch.ones(8, 8) @ w.cpu()) * 2 + 1)


def test_capture_and_replay_on_the_second_device():
    with openreg.device(1):
        x = torch.ones(4, device="openreg:1")
        g = openreg.Graph()
        with openreg.graph(g):
            y = x * 3
        assert openreg.graph.default_capture_streams[1].device_index == 1
    x.fill_(2)
    g.replay()  # on device 1's current stream, whatever the current device
    assert y.device == torch.device("openreg:1")
    assert torch.equal(y.cpu(), torch.full((4,), 6.0))


def test_cuda_style_capture_begin_and_end_with_a_pool_and_a_mode():
    pool = openreg.graph_pool_handle()
    side = openreg.Stream()
    x = torch.ones(3, device=DEV)
    g = openreg.Graph()
    with openreg.stream(side):
        g.capture_begin(pool=pool, capture_error_mode="thread_local")
        assert openreg.is_current_stream_capturing()
        y = x + 1
        g.capture_end()
    assert g.pool() == pool
    g.replay()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


def test_reset_during_a_capture_ends_it_and_releases_the_pool():
    x = torch.ones(3, device=DEV)
    openreg.empty_cache()
    reserved = openreg.memory_reserved()
    side = openreg.Stream()
    g = openreg.Graph()
    with openreg.stream(side):
        g.capture_begin()
        y = x * 2
        with pytest.raises(RuntimeError, match=r"capturing a graph|must complete"):
            x.sum().item()  # invalidates the capture
    del y
    g.reset()  # ends the capture and drops its pool
    assert openreg.memory_reserved() == reserved
    _check_device_usable()
