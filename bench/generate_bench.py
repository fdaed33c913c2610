"""Greedy `LlamaForCausalLM.generate` on openreg against the CPU, one fresh process per run.

The figure of interest varies between processes, not within one (issue 12: openreg took 0.67-0.89x
the CPU's time in 11 of 14 runs and 1.34-1.41x in 3), so the parent starts `--runs` child
processes one after another and prints each one's ratio. A child builds the same small Llama
(bench/hf_models.py, grouped-query attention) on both devices from one seed, checks that both
generate the same tokens, then times `--repeats` generate calls alternating between the CPU and
openreg and keeps each device's median. Each openreg call ends with torch.openreg.synchronize()
(generate itself already waits for the device every token: see below).

Per run it also records what could explain a slow process:
- the ledger (`torch.openreg.count_paths`) of one generate: paths and Meta kernel runs;
- the operators of one generate on openreg by name (a TorchDispatchMode), in particular those that
  make the host wait for the device (`_local_scalar_dense` for `.item()`/`bool()`, copies to the
  CPU);
- per thread, over the timed openreg calls: CPU time used, voluntary and involuntary context
  switches, and the core it last ran on (from /proc/self/task), the host thread being `python`,
  the stream worker `openreg0w0`, OpenMP's threads the rest.

    generate_bench.py [--runs 14] [--repeats 5] [--env NAME=VALUE ...] [--json PATH]
    generate_bench.py --placements [--runs N]   worker on the host's core / the other / free, per process
    generate_bench.py --child          one run in this process, JSON on the last line
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import hf_models

PROMPT = 32
NEW_TOKENS = 20
# Operators after which the host holds a value read from the device, so it waited for the device.
WAITING_OPS = ("aten::_local_scalar_dense", "aten::is_nonzero", "aten::equal")


def build(device: str) -> tuple[Any, torch.Tensor]:
    tf = hf_models._transformers()
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(hf_models.llama_config(tf)).eval().to(device)
    prompt = torch.randint(0, hf_models.VOCAB, (1, PROMPT)).to(device)
    return model, prompt


def generate(model: Any, prompt: torch.Tensor) -> torch.Tensor:
    with torch.inference_mode():
        # min_new_tokens: a random model could emit its end-of-sequence token early.
        out = model.generate(prompt, do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                             pad_token_id=0)
    if out.device.type == "openreg":
        torch.openreg.synchronize()
    return out


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.to_cpu = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        self.counts[name] += 1
        if name == "aten::_to_copy" and str(kwargs.get("device")) == "cpu" and args[0].device.type == "openreg":
            self.to_cpu += 1
        if name == "aten::copy_" and args[0].device.type == "cpu" and args[1].device.type == "openreg":
            self.to_cpu += 1
        return func(*args, **kwargs)


def thread_stats() -> dict[int, dict[str, Any]]:
    """Per thread of this process: a label, CPU time (the scheduler's exact sum, in seconds), context
    switches, migrations between cores and the core it last ran on. Linux copies a thread's name to
    the threads it creates, so OpenMP's threads carry the name of the thread whose team they serve:
    the label adds the creation rank among threads of that name (`openreg0w0#1` is the worker's
    OpenMP thread), and the main thread is `host`."""
    stats = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            stat = (task / "stat").read_text()
            sched = dict(line.split(":", 1) for line in (task / "sched").read_text().splitlines() if ":" in line)
        except FileNotFoundError:  # the thread ended in between
            continue
        sched = {key.strip(): value.strip() for key, value in sched.items()}
        stats[int(task.name)] = {"name": stat[stat.index("(") + 1:stat.rindex(")")],
                                 "cpu_s": float(sched["se.sum_exec_runtime"]) / 1e3,
                                 "voluntary": int(sched["nr_voluntary_switches"]),
                                 "involuntary": int(sched["nr_involuntary_switches"]),
                                 "migrations": int(sched["se.nr_migrations"]),
                                 "core": int(stat[stat.rindex(")") + 2:].split()[36])}
    ranks: collections.Counter[str] = collections.Counter()
    for tid in sorted(stats):
        name = stats[tid]["name"]
        stats[tid]["name"] = "host" if tid == os.getpid() else f"{name}#{ranks[name]}"
        ranks[name] += 1
    return stats


def thread_delta(before: dict[int, dict[str, Any]], after: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for tid, a in after.items():
        b = before.get(tid, {"cpu_s": 0.0, "voluntary": 0, "involuntary": 0, "migrations": 0})
        rows.append({"tid": tid, "name": a["name"], "core": a["core"],
                     "cpu_s": a["cpu_s"] - b["cpu_s"],
                     "voluntary": a["voluntary"] - b["voluntary"],
                     "involuntary": a["involuntary"] - b["involuntary"],
                     "migrations": a["migrations"] - b["migrations"], "new": tid not in before})
    return sorted(rows, key=lambda r: -r["cpu_s"])


def pin(mode: str) -> dict[str, list[int]]:
    """Pins the host thread to core 0 and the stream worker to core 0 ("same") or 1 ("split"),
    leaving OpenMP's threads free: whether sharing a core is what makes a process slow."""
    placed = {}
    for tid, t in thread_stats().items():
        if t["name"] in ("host", "openreg0w0#0"):
            cores = {0} if t["name"] == "host" or mode == "same" else {1}
            os.sched_setaffinity(tid, cores)
            placed[t["name"]] = sorted(cores)
    return placed


def placements(repeats: int) -> dict[str, Any]:
    """In one process, generate calls alternate between the CPU and openreg with the stream worker
    on the host's core, on the other core, and free (OpenMP's threads stay free): the effect of the
    placement alone, with the machine's load drifting alike over all four."""
    torch.openreg.init()
    cpu = build("cpu")
    dev = build("openreg")
    generate(*cpu), generate(*dev)
    tids = {t["name"]: tid for tid, t in thread_stats().items()}
    host, worker = tids["host"], tids["openreg0w0#0"]
    everywhere = sorted(os.sched_getaffinity(0))
    modes = {"cpu": None, "openreg, worker on the host's core": ({0}, {0}),
             "openreg, worker on the other core": ({0}, {1}), "openreg, both free": (everywhere, everywhere)}
    samples: dict[str, list[float]] = {mode: [] for mode in modes}
    for _ in range(repeats):
        for mode, cores in modes.items():
            os.sched_setaffinity(host, {0} if cores is None else cores[0])
            if cores is not None:
                os.sched_setaffinity(worker, cores[1])
            start = time.perf_counter()
            generate(*(cpu if cores is None else dev))
            samples[mode].append(time.perf_counter() - start)
    return {mode: statistics.median(times) * 1e3 for mode, times in samples.items()}


def child(repeats: int, pin_mode: str | None) -> dict[str, Any]:
    torch.openreg.init()
    cpu_model, cpu_prompt = build("cpu")
    dev_model, dev_prompt = build("openreg")
    cpu_tokens = generate(cpu_model, cpu_prompt)  # the first call of each pays one-time costs
    dev_tokens = generate(dev_model, dev_prompt)
    placed = pin(pin_mode) if pin_mode else {}
    result: dict[str, Any] = {"pinned": placed, "equal_to_cpu": torch.equal(cpu_tokens, dev_tokens.cpu()),
                              "pid": os.getpid(), "affinity": sorted(os.sched_getaffinity(0)),
                              "load_average_at_start": [round(x, 2) for x in os.getloadavg()]}
    with torch.openreg.count_paths() as paths:
        generate(dev_model, dev_prompt)
    result["ledger_per_generate"] = dict(paths)

    samples: dict[str, list[float]] = {"cpu": [], "openreg": []}
    spent: dict[str, dict[int, dict[str, Any]]] = {"cpu": {}, "openreg": {}}
    cores: list[tuple[int | None, int | None]] = []
    for _ in range(repeats):
        for device, model, prompt in (("cpu", cpu_model, cpu_prompt), ("openreg", dev_model, dev_prompt)):
            before = thread_stats()
            start = time.perf_counter()
            generate(model, prompt)
            samples[device].append(time.perf_counter() - start)
            after = thread_stats()
            if device == "openreg":  # the cores the host and the worker were last on, after each call
                last = {t["name"]: t["core"] for t in after.values()}
                cores.append((last.get("host"), last.get("openreg0w0#0")))
            for row in thread_delta(before, after):
                total = spent[device].setdefault(row["tid"], {**row, "cpu_s": 0.0, "voluntary": 0, "involuntary": 0,
                                                                     "migrations": 0})
                for key in ("cpu_s", "voluntary", "involuntary", "migrations"):
                    total[key] += row[key]
                total["core"] = row["core"]
    for device in samples:
        result[f"{device}_ms"] = statistics.median(samples[device]) * 1e3
        result[f"{device}_ms_all"] = [round(s * 1e3, 2) for s in samples[device]]
        per_generate = ({**r, "cpu_ms": round(r.pop("cpu_s") / repeats * 1e3, 2),
                         "voluntary": r["voluntary"] / repeats, "involuntary": r["involuntary"] / repeats,
                         "migrations": r["migrations"] / repeats} for r in spent[device].values())
        result[f"threads_{device}"] = sorted((r for r in per_generate if r["cpu_ms"] >= 0.5),
                                             key=lambda r: -r["cpu_ms"])
    result["ratio"] = result["openreg_ms"] / result["cpu_ms"]
    result["host_worker_cores"] = cores
    result["same_core"] = sum(h == w for h, w in cores)

    counter = OpCounter()
    with counter:
        generate(dev_model, dev_prompt)
    result["ops_per_generate"] = sum(counter.counts.values())
    result["waits_per_generate"] = {op: counter.counts[op] for op in WAITING_OPS if counter.counts[op]}
    result["copies_to_cpu_per_generate"] = counter.to_cpu
    result["top_ops"] = counter.counts.most_common(12)
    return result


def parent(args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    for item in args.env:
        name, _, value = item.partition("=")
        env[name] = value
    shown = " ".join(args.env + ([f"pin={args.pin}"] if args.pin else [])) or "defaults"
    print(f"generate_bench: LlamaForCausalLM (2 layers, 256 wide, 8 query / 2 key-value heads), prompt {PROMPT}, "
          f"greedy, {NEW_TOKENS} new tokens; {args.runs} processes, median of {args.repeats} calls each; "
          f"environment: {shown}")
    print(f"{'run':>4}{'CPU ms':>9}{'openreg ms':>12}{'ratio':>7}  {'=CPU':<5}{'waits/gen':>10}{'meta/gen':>9}"
          f"{'same core':>10}  threads on openreg, per generate: CPU ms/involuntary switches/migrations")
    runs = []
    for i in range(args.runs):
        proc = subprocess.run([sys.executable, __file__, "--child", "--repeats", str(args.repeats)]
                              + (["--pin", args.pin] if args.pin else []), env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            reason = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode
            print(f"{i + 1:>4}  FAILED: {reason}")
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        runs.append(r)
        waits = sum(r["waits_per_generate"].values()) + r["copies_to_cpu_per_generate"]
        busy = " ".join(f"{t['name']} {t['cpu_ms']:.0f}/{t['involuntary']:.0f}/{t['migrations']:.0f}"
                        for t in r["threads_openreg"][:4])
        print(f"{i + 1:>4}{r['cpu_ms']:>9.1f}{r['openreg_ms']:>12.1f}{r['ratio']:>7.2f}  "
              f"{'yes' if r['equal_to_cpu'] else 'NO':<5}{waits:>10}{r['ledger_per_generate'].get('meta_calls', 0):>9}"
              f"{r['same_core']:>8}/{len(r['host_worker_cores'])}  "
              f"{busy}", flush=True)
    if runs:
        ratios = sorted(r["ratio"] for r in runs)
        print(f"ratios: min {ratios[0]:.2f}, median {statistics.median(ratios):.2f}, max {ratios[-1]:.2f}; "
              f"runs above 1.0: {sum(x > 1.0 for x in ratios)}/{len(ratios)}")
        first = runs[0]
        print(f"per generate (run 1): {first['ops_per_generate']} operators, waits {first['waits_per_generate']}, "
              f"copies to the CPU {first['copies_to_cpu_per_generate']}, ledger {first['ledger_per_generate']}")
    return {"benchmark": "generate", "environment": args.env, "runs": runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=14, help="processes, one after another")
    parser.add_argument("--repeats", type=int, default=5, help="timed generate calls per device and process")
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="set in the children's environment (OPENREG_WORKER_SPIN_US=0, OMP_NUM_THREADS=1, ...)")
    parser.add_argument("--pin", choices=("same", "split"),
                        help="host on core 0, stream worker on core 0 (same) or 1 (split)")
    parser.add_argument("--placements", action="store_true",
                        help="per process, alternate the worker on the host's core, on the other, and free")
    parser.add_argument("--placements-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", dest="json_path", help="write every run's record here")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.placements:
        env = {**os.environ, **dict(item.partition("=")[::2] for item in args.env)}
        for run in range(args.runs):
            proc = subprocess.run([sys.executable, __file__, "--placements-child", "--repeats", str(args.repeats)],
                                  env=env, capture_output=True, text=True, check=True)
            medians = json.loads(proc.stdout.strip().splitlines()[-1])
            cpu = medians.pop("cpu")
            print(f"run {run + 1}: CPU {cpu:.1f} ms; " + "; ".join(f"{mode} {ms:.1f} ms ({ms / cpu:.2f})"
                                                              for mode, ms in medians.items()), flush=True)
        return
    if args.placements_child:
        print(json.dumps(placements(args.repeats)))
        return
    if args.child:
        print(json.dumps(child(args.repeats, args.pin)))
        return
    document = parent(args)
    if args.json_path:
        pathlib.Path(args.json_path).write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
