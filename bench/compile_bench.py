"""torch.compile on openreg against the CPU, in one process (docs/compile.md).

For each training case of bench/models.py named below, the step (zero_grad, forward, loss,
backward, optimizer step) is built from the same seed for the CPU and for openreg and compiled
whole with torch.compile (Inductor): Dynamo breaks the graph at backward(), AOTAutograd compiles
forward and backward, and the optimizer step is compiled too. Figures:

  compile   seconds of the first step (tracing, lowering, C++ compilation, one step), with
            Inductor's caches in a fresh directory, so every graph and kernel is compiled;
            openreg ÷ CPU. Before timing, one small graph is compiled on each device so that
            one-time costs (the compile workers, the precompiled header) fall on neither.
  compiled  median seconds per compiled step over 7 repeats that alternate between the devices;
            openreg ÷ CPU (every openreg repeat ends with a synchronize: completed work).
  eager     the same step uncompiled on openreg; compiled ÷ eager is the speed-up compile gives.
  losses    whether the first three compiled losses are bitwise equal on the two devices.

Then a second process compiles the first case on openreg again with the same cache directory:
its first step ("warm") against this process's cold one shows what Inductor's caches save.

    compile_bench.py [--only mlp,transformer_lm,gpt2] [--json PATH]

GPT-2 comes from a `transformers` config (bench/hf_models.py; installed by `make bench-compile`).
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

# Inductor reads its cache directory when it is first imported: set it before torch.
if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="openreg-compile-bench-")

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import hf_models

import models

REPEATS = 7
STEPS_PER_REPEAT = 3
CASES = {"mlp": models.mlp, "transformer_lm": models.transformer_lm, "gpt2": hf_models.gpt2}
# Targets from the issue, openreg ÷ CPU at most.
TARGETS = {"compiled": 1.05, "compile": 1.2}


def sync(device: str) -> None:
    if device == "openreg":
        torch.openreg.synchronize()


def warm_up_inductor() -> None:
    for device in ("cpu", "openreg"):
        torch.compile(lambda x: torch.relu(x) + 1)(torch.randn(8, device=device))
        sync(device)


def first_step(step, device: str) -> tuple[float, float]:
    start = time.perf_counter()
    loss = step()
    value = loss.item()
    return time.perf_counter() - start, value


def timed(step, device: str) -> float:
    start = time.perf_counter()
    for _ in range(STEPS_PER_REPEAT):
        step()
    sync(device)
    return (time.perf_counter() - start) / STEPS_PER_REPEAT


def run_case(name: str) -> dict:
    build = CASES[name]
    compiled, compile_time, losses = {}, {}, {}
    for device in ("cpu", "openreg"):
        step = torch.compile(build(device))
        compile_time[device], first = first_step(step, device)
        losses[device] = [first] + [step().item() for _ in range(2)]
        compiled[device] = step
    eager = build("openreg")
    for _ in range(2):
        eager()
    sync("openreg")
    times = {"cpu": [], "openreg": [], "eager": []}
    for _ in range(REPEATS):
        times["cpu"].append(timed(compiled["cpu"], "cpu"))
        times["openreg"].append(timed(compiled["openreg"], "openreg"))
        times["eager"].append(timed(eager, "openreg"))
    med = {key: statistics.median(values) for key, values in times.items()}
    return {
        "case": name,
        "compile_s": compile_time,
        "compile_ratio": compile_time["openreg"] / compile_time["cpu"],
        "step_s": med,
        "compiled_ratio": med["openreg"] / med["cpu"],
        "speedup_over_eager": med["eager"] / med["openreg"],
        "losses_bitwise": losses["cpu"] == losses["openreg"],
    }


def warm_second_process(name: str) -> float:
    here = str(pathlib.Path(__file__).resolve().parent)
    code = (
        f"import sys, time, torch; sys.path.insert(0, {here!r}); import compile_bench as b; "
        f"step = torch.compile(b.CASES[{name!r}]('openreg')); t = time.perf_counter(); step().item(); "
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ), check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default=",".join(CASES))
    parser.add_argument("--json")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n]
    print(f"load average {os.getloadavg()[0]:.2f}, torch threads {torch.get_num_threads()}, "
          f"cache {os.environ['TORCHINDUCTOR_CACHE_DIR']}")
    warm_up_inductor()
    rows = []
    header = (f"{'case':16} {'compile cpu':>11} {'openreg':>8} {'ratio':>6} {'step cpu':>9} {'openreg':>8} "
              f"{'ratio':>6} {'eager':>8} {'speed-up':>8}  losses")
    print(header)
    for name in names:
        try:
            row = run_case(name)
        except Exception as error:  # noqa: BLE001  a case that cannot run is reported, not fatal
            print(f"{name:16} skipped: {type(error).__name__}: {str(error).splitlines()[0][:120]}")
            rows.append({"case": name, "skipped": f"{type(error).__name__}: {error}"[:500]})
            continue
        rows.append(row)
        c, s = row["compile_s"], row["step_s"]
        print(f"{name:16} {c['cpu']:10.1f}s {c['openreg']:7.1f}s {row['compile_ratio']:6.2f} "
              f"{s['cpu'] * 1e3:7.1f}ms {s['openreg'] * 1e3:6.1f}ms {row['compiled_ratio']:6.2f} "
              f"{s['eager'] * 1e3:6.1f}ms {row['speedup_over_eager']:7.2f}x  "
              f"{'bitwise' if row['losses_bitwise'] else 'differ'}", flush=True)
    first = next((r for r in rows if "skipped" not in r), None)
    warm = None
    if first is not None:
        warm = warm_second_process(first["case"])
        print(f"second process, {first['case']} on openreg: first step {warm:.2f}s warm "
              f"against {first['compile_s']['openreg']:.2f}s cold")
    print(f"targets: compiled step ratio <= {TARGETS['compiled']}, compile time ratio <= {TARGETS['compile']}; "
          f"load average {os.getloadavg()[0]:.2f}")
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps(
            {"rows": rows, "warm_second_process_s": warm, "targets": TARGETS,
             "load_average": os.getloadavg()}, indent=2))


if __name__ == "__main__":
    main()
