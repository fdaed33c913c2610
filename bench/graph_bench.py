"""Graph replay on openreg against eager execution on openreg and on the CPU.

Three workloads, each timed as a median of `--repeats` runs of `--steps` iterations (each run
ends with a device synchronization):
  - the MLP training step of issue 16: batch 16, 128-256-256-10, cross-entropy, SGD with momentum;
  - a small transformer LM forward (bench/models.py: 2 layers of 128, seq 64, batch 16), no grad;
  - with --gpt2 (needs `transformers`, `make bench` installs it): a Hugging Face GPT-2 forward
    built from a config (2 layers of 128, seq 64, batch 4), no grad.
Columns: CPU eager, openreg eager and openreg replay (ms per iteration), replay/CPU, and the host
time per replay (the time `replay()` itself takes on the calling thread). openreg is timed first,
while the host thread has run no parallel CPU kernel; "after CPU" is the replay timed again once
the CPU rows have run and the host thread has had an OpenMP pool, which it gives back while it
waits for the device (docs/graphs.md, "Threads: OpenMP helpers on shared cores"). "CPU alone" is
CPU eager again, in a child process that never loads torch_openreg, to show whether openreg's
presence slowed the CPU column. Each workload also checks that the replayed results are bitwise
equal to the same iterations run eagerly on openreg and on the CPU, and prints the result.

    python bench/graph_bench.py [--repeats 7] [--steps 20] [--gpt2] [json-path]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from models import TransformerLM


def finish(device: str) -> None:
    if device == "openreg":
        torch.openreg.synchronize()


def median(fn: Callable[[], None], device: str, steps: int, repeats: int) -> tuple[float, float]:
    """(median seconds per iteration, median host seconds per iteration before the final sync)."""
    for _ in range(3):
        fn()
    finish(device)
    total, host = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(steps):
            fn()
        issued = time.perf_counter()
        finish(device)
        end = time.perf_counter()
        total.append((end - start) / steps)
        host.append((issued - start) / steps)
    return statistics.median(total), statistics.median(host)


# --- the MLP training step ---------------------------------------------------------------------


def mlp_setup(device: str):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(16, 128, generator=g).to(device)
    y = torch.randint(0, 10, (16,), generator=g).to(device)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return model, step


def capture(step: Callable[[], None], warmup: int = 3) -> torch.openreg.Graph:
    """Warms `step` up on a side stream, then captures one call of it."""
    openreg = torch.openreg
    side = openreg.Stream()
    side.wait_stream(openreg.current_stream())
    with openreg.stream(side):
        for _ in range(warmup):
            step()
    openreg.current_stream().wait_stream(side)
    graph = openreg.Graph()
    with openreg.graph(graph):
        step()
    return graph


class Workload:
    """One workload on both devices: what each phase of the bench times, and the equality check."""

    def __init__(
        self,
        cpu: Callable[[], None],
        eager: Callable[[], None],
        replay: Callable[[], None],
        equal: Callable[[], bool],
        keep: object,
    ) -> None:
        self.cpu, self.eager, self.replay, self.equal = cpu, eager, replay, equal
        self.keep = keep  # what the graph reads and writes: it must outlive the graph's replays


def mlp_workload() -> Workload:
    _, cpu_step = mlp_setup("cpu")
    _, eager_step = mlp_setup("openreg")
    _, replay_step = mlp_setup("openreg")
    graph = capture(replay_step)

    def equal() -> bool:
        """The same number of steps from the same start, replayed, eager and on the CPU."""
        cpu_model, cpu_step = mlp_setup("cpu")
        eager_model, eager_step = mlp_setup("openreg")
        model, replay_step = mlp_setup("openreg")
        graph = capture(replay_step)  # 3 warm-up steps ran eagerly
        for _ in range(3):
            cpu_step()
            eager_step()
        for _ in range(10):
            cpu_step()
            eager_step()
            graph.replay()
        return all(
            torch.equal(a.detach().cpu(), b.detach().cpu()) and torch.equal(a.detach().cpu(), c.detach())
            for a, b, c in zip(model.parameters(), eager_model.parameters(), cpu_model.parameters(), strict=True)
        )

    return Workload(cpu_step, eager_step, graph.replay, equal, keep=replay_step)


# --- forwards ---------------------------------------------------------------------------------


def forward_workload(build: Callable[[str], tuple[nn.Module, torch.Tensor]]) -> Workload:
    openreg = torch.openreg
    cpu_model, cpu_x = build("cpu")
    model, x = build("openreg")
    with torch.no_grad():
        reference = model(x)
        side = openreg.Stream()
        side.wait_stream(openreg.current_stream())
        with openreg.stream(side):
            model(x)
        openreg.current_stream().wait_stream(side)
        graph = openreg.Graph()
        with openreg.graph(graph):
            out = model(x)

    def no_grad(fn: Callable[[], object]) -> Callable[[], None]:
        def call() -> None:
            with torch.no_grad():
                fn()

        return call

    def equal() -> bool:
        with torch.no_grad():
            graph.replay()
            expected = cpu_model(cpu_x)
        logits = out if isinstance(out, torch.Tensor) else out.logits
        ref = reference if isinstance(reference, torch.Tensor) else reference.logits
        exp = expected if isinstance(expected, torch.Tensor) else expected.logits
        return torch.equal(logits.cpu(), ref.cpu()) and torch.equal(logits.cpu(), exp)

    return Workload(no_grad(lambda: cpu_model(cpu_x)), no_grad(lambda: model(x)), graph.replay, equal, keep=(model, x))


def measure(workloads: dict[str, Workload], steps: int, repeats: int) -> dict[str, dict]:
    """openreg first, while the host thread has run no parallel CPU kernel; then the CPU; then the
    replays again, now that the host thread keeps an OpenMP pool (docs/graphs.md, "Threads")."""
    rows: dict[str, dict] = {name: {} for name in workloads}
    for name, w in workloads.items():
        rows[name]["eager"] = median(w.eager, "openreg", steps, repeats)
        rows[name]["replay"] = median(w.replay, "openreg", steps, repeats)
    for name, w in workloads.items():
        rows[name]["cpu"] = median(w.cpu, "cpu", steps, repeats)
    for name, w in workloads.items():
        rows[name]["replay_after_cpu"] = median(w.replay, "openreg", steps, repeats)
    for name, w in workloads.items():
        rows[name]["equal"] = w.equal()
    return rows


def transformer(device: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = TransformerLM(1000, 64, d_model=128, heads=4, layers=2).eval().to(device)
    tokens = torch.randint(0, 1000, (16, 64), generator=torch.Generator().manual_seed(2))
    return model, tokens.to(device)


def gpt2(device: str) -> tuple[nn.Module, torch.Tensor]:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(
        n_layer=2, n_embd=128, n_head=4, n_positions=64, vocab_size=1000, bos_token_id=0, eos_token_id=0
    )
    model = GPT2LMHeadModel(config).eval().to(device)
    tokens = torch.randint(0, 1000, (4, 64), generator=torch.Generator().manual_seed(2))
    return model, tokens.to(device)


# --- CPU eager in a process of its own ---------------------------------------------------------


def cpu_alone_times(steps: int, repeats: int, with_gpt2: bool) -> list[float]:
    """Seconds per iteration of each workload on the CPU; run in a child without torch_openreg."""
    times = [median(mlp_setup("cpu")[1], "cpu", steps, repeats)[0]]
    for build in [transformer] + ([gpt2] if with_gpt2 else []):
        model, x = build("cpu")
        with torch.no_grad():
            times.append(median(lambda model=model, x=x: model(x), "cpu", steps, repeats)[0])
    return times


def cpu_alone(steps: int, repeats: int, with_gpt2: bool) -> list[float]:
    here = os.path.dirname(os.path.abspath(__file__))
    code = (
        f"import sys, json; sys.path.insert(0, {here!r}); import graph_bench as g; "
        f"print(json.dumps(g.cpu_alone_times({steps}, {repeats}, {with_gpt2})))"
    )
    env = dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--gpt2", action="store_true", help="also a transformers GPT-2 forward")
    parser.add_argument("json", nargs="?", help="write the rows here as JSON")
    args = parser.parse_args()
    import torch_openreg  # noqa: F401  (explicit: works with autoload disabled too)

    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, load average "
        f"{os.getloadavg()[0]:.2f}; medians of {args.repeats} x {args.steps} iterations"
    )
    workloads = {"MLP train step (16, 128-256-256-10, SGD momentum)": mlp_workload()}
    workloads["transformer LM forward (2x128, seq 64, batch 16)"] = forward_workload(transformer)
    if args.gpt2:
        workloads["GPT-2 forward from a config (2x128, seq 64, batch 4)"] = forward_workload(gpt2)
    rows = measure(workloads, args.steps, args.repeats)
    for r, alone in zip(rows.values(), cpu_alone(args.steps, args.repeats, args.gpt2), strict=True):
        r["cpu_alone"] = alone
    print(
        f"{'workload':54} {'CPU ms':>7} {'eager ms':>8} {'replay ms':>9} {'replay/CPU':>10} "
        f"{'host us/replay':>14} {'after CPU ms':>12} {'CPU alone ms':>12} {'replay/CPU alone':>16}  bitwise equal"
    )
    for name, r in rows.items():
        print(
            f"{name:54} {r['cpu'][0] * 1e3:7.3f} {r['eager'][0] * 1e3:8.3f} {r['replay'][0] * 1e3:9.3f} "
            f"{r['replay'][0] / r['cpu'][0]:10.2f} {r['replay'][1] * 1e6:14.1f} "
            f"{r['replay_after_cpu'][0] * 1e3:12.3f} {r['cpu_alone'] * 1e3:12.3f} "
            f"{r['replay'][0] / r['cpu_alone']:16.2f}  {r['equal']}"
        )
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
