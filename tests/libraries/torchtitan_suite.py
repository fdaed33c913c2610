"""torchtitan's Llama 3 debug model on openreg, against the same run on the CPU over Gloo.

`make test-torchtitan` runs this in .venv-torchtitan/ (docs/torchtitan.md). Each run is torchtitan's
own trainer launched by torchrun, on openreg with no change (`python -m torchtitan.train`, openreg
found by torchtitan itself and its group served by occl) and on the CPU through
tests/libraries/torchtitan_cpu.py (Note [torchtitan on the CPU] there), with the model of
tests/libraries/torchtitan_configs.py (Note [The debug model's attention] there). Both start from one
seed checkpoint, made once on the CPU, so that they start from the same weights whatever each
device's initialization draws. The per-step losses are read from torchtitan's TensorBoard files
(float32, as the trainer computed them) and compared; the report goes to WORK/report.md and .json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCH = HERE / "torchtitan_launch.py"
TORCHRUN = Path(sys.executable).parent / "torchrun"
PARTS = ("fsdp", "tp", "dcp", "two-hosts")

# The corpus: sentences of a small made-up grammar, the same on every run (random.Random(0)), so that
# the model has something to learn and the losses fall.
_SUBJECTS = ["the stream", "a worker", "the allocator", "an event", "the device", "a kernel", "the host",
             "the queue", "a block", "the segment", "a tensor", "the graph", "the engine", "a rank"]
_VERBS = ["waits for", "records", "frees", "launches", "copies", "reads", "writes", "orders", "holds",
          "returns", "joins", "splits", "caches", "signals"]
_OBJECTS = ["the next task", "its memory", "a second stream", "the last event", "every block",
            "the kernel window", "a pinned buffer", "the current stream", "one segment", "the result",
            "the gradient", "a shard of the weights", "the checkpoint", "the loss"]
_ENDINGS = ["before the host returns", "on its own thread", "in program order", "after the collective",
            "when the queue is empty", "at the next synchronization", "without a copy", "once per step"]


def corpus(documents: int = 400) -> list[str]:
    rng = random.Random(0)
    texts = []
    for _ in range(documents):
        sentences = []
        for _ in range(rng.randint(3, 12)):
            words = [rng.choice(_SUBJECTS), rng.choice(_VERBS), rng.choice(_OBJECTS)]
            if rng.random() < 0.5:
                words.append(rng.choice(_ENDINGS))
            sentence = " ".join(words)
            sentences.append(sentence[0].upper() + sentence[1:] + ".")
        texts.append(" ".join(sentences))
    return texts


BOS, EOS = "<|begin_of_text|>", "<|end_of_text|>"


def write_assets(assets: Path) -> None:
    """ASSETS/corpus/data.json (JSON lines with "text", what torchtitan's c4_test loader reads) and
    ASSETS/tokenizer/ (a byte-level BPE tokenizer trained here on that corpus, within the debug model's
    vocabulary of 2048, and its tokenizer_config.json naming BOS and EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    texts = corpus()
    (assets / "corpus").mkdir(parents=True, exist_ok=True)
    with open(assets / "corpus" / "data.json", "w") as out:
        for text in texts:
            out.write(json.dumps({"text": text}) + "\n")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=[BOS, EOS], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer)
    (assets / "tokenizer").mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(assets / "tokenizer" / "tokenizer.json"))
    config = {"bos_token": BOS, "eos_token": EOS, "add_bos_token": True, "add_eos_token": True}
    (assets / "tokenizer" / "tokenizer_config.json").write_text(json.dumps(config, indent=1) + "\n")


# -- runs ------------------------------------------------------------------------------------------

def model_flags(assets: Path, steps: int) -> list[str]:
    """torchtitan's flags common to every run: the model (Note [The debug model's attention] in
    torchtitan_configs.py), the local corpus and tokenizer, a short sequence (the machine has 2
    cores), float32 losses in TensorBoard files, one seed. `partial_dtensor`: FSDP2 on plain device
    meshes and DTensor tensor parallelism; torchtitan 0.3.0's default `spmd_types` needs the
    parameters as DTensors on the whole mesh, which torch 2.13's fully_shard refuses (docs/torchtitan.md)."""
    return ["--module", "torchtitan_configs", "--config", "llama3_debugmodel_sdpa",
            "--hf_assets_path", str(assets / "tokenizer"),
            "--dataloader.dataset", "c4_test", "--dataloader.dataset_path", str(assets / "corpus"),
            "--training.seq_len", "256", "--training.local_batch_size", "2", "--training.steps", str(steps),
            "--parallelism.spmd_backend", "partial_dtensor",
            "--metrics.enable_tensorboard", "--metrics.log_freq", "1", "--debug.seed", "7"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(device: str, work: Path, ifname: str = "lo", devices: int = 2) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"PYTHONPATH": str(HERE), "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "HF_HOME": str(work / "hf-home"), "GLOO_SOCKET_IFNAME": ifname, "OMP_NUM_THREADS": "1",
                "OPENREG_DEVICE_COUNT": str(devices), "OPENREG_DEVICE_MEMORY": "2G"})
    if device == "cpu":
        env["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    return env


class RunFailed(RuntimeError):
    pass


def torchrun(name: str, device: str, work: Path, nproc: int, flags: list[str], *, devices: int = 2,
             timeout: int = 1800, trains: bool = True) -> dict:
    """One torchtitan job on one host: WORK/runs/NAME/ (torchtitan's dump folder) and NAME.log."""
    dump = work / "runs" / name
    shutil.rmtree(dump, ignore_errors=True)
    dump.mkdir(parents=True)
    command = [str(TORCHRUN), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{free_port()}", str(LAUNCH), device, *flags,
               "--dump_folder", str(dump)]
    return run_logged(name, [command], [environment(device, work, devices=devices)], dump, timeout, trains)


def run_logged(name: str, commands: list[list[str]], envs: list[dict], dump: Path, timeout: int,
               trains: bool = True) -> dict:
    """Starts every command (one per host), waits for all; raises RunFailed unless all exit 0."""
    start = time.monotonic()
    logs = [dump.parent / (f"{name}.log" if len(commands) == 1 else f"{name}-host{i}.log")
            for i in range(len(commands))]
    procs = []
    for command, env, log in zip(commands, envs, logs, strict=True):
        with open(log, "w") as out:
            out.write("$ " + " ".join(command) + "\n")
            out.flush()
            procs.append(subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT))
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1, timeout - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes.append("timeout")
    seconds = time.monotonic() - start
    print(f"{name:24} exit {codes}, {seconds:.0f} s ({', '.join(str(log) for log in logs)})", flush=True)
    if any(code != 0 for code in codes):
        raise RunFailed(f"{name}: exit {codes}; see {', '.join(str(log) for log in logs)}")
    return {"name": name, "seconds": round(seconds, 1), "losses": read_losses(dump) if trains else {},
            "logs": [str(log) for log in logs]}


def read_losses(dump: Path) -> dict[int, float]:
    """Step -> torchtitan's global average loss, from its TensorBoard files (float32 values as the
    trainer computed them; the console prints 5 decimals)."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    losses: dict[int, float] = {}
    for events in sorted(dump.glob("tb/**/events.out.tfevents.*")):
        for event in EventFileLoader(str(events)).Load():
            for value in event.summary.value:
                if value.tag == "loss_metrics/global_avg_loss":
                    losses[event.step] = value.simple_value if value.HasField("simple_value") else \
                        float(value.tensor.float_val[0])
    if not losses:
        raise RunFailed(f"no losses in {dump}/tb")
    return losses


def earlier_run(work: Path, name: str) -> dict | None:
    dump = work / "runs" / name
    try:
        return {"name": name, "seconds": None, "losses": read_losses(dump), "logs": [str(dump.parent / f"{name}.log")]}
    except RunFailed:
        return None


def seed_checkpoint(work: Path, assets: Path) -> Path:
    """The initial weights of every run: torchtitan's seed checkpoint (one process, on the CPU), so
    that both devices start from the same weights (Note [DTensor's random numbers on openreg] in
    torch_openreg/_dtensor_random.py: a sharded initialization draws per rank on either device, and
    the 2-rank and 4-rank layouts shard differently)."""
    folder = work / "seed" / "checkpoint"
    if not (folder / "step-0").is_dir():
        torchrun("seed", "cpu", work, 1, [*model_flags(assets, 1), "--checkpoint.enable",
                                          "--checkpoint.create_seed_checkpoint", "--checkpoint.folder", str(folder)],
                 trains=False)
    return folder / "step-0"


def checkpoint_flags(seed: Path, interval: int) -> list[str]:
    return ["--checkpoint.enable", "--checkpoint.initial_load_path", str(seed),
            "--checkpoint.interval", str(interval), "--checkpoint.keep_latest_k", "0"]


# -- two hosts -------------------------------------------------------------------------------------

NAMESPACES = (("titan-host0", "titan-veth0", "10.77.0.1"), ("titan-host1", "titan-veth1", "10.77.0.2"))


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


@contextlib.contextmanager
def two_hosts():
    """Two network namespaces joined by a veth pair, 10.77.0.1/24 and 10.77.0.2/24, each with its
    loopback up; removed on the way out, whatever happened."""
    try:
        for ns, _, _ in NAMESPACES:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        for ns, _, _ in NAMESPACES:
            ip("netns", "add", ns)
        (ns0, veth0, _), (ns1, veth1, _) = NAMESPACES
        ip("link", "add", veth0, "netns", ns0, "type", "veth", "peer", "name", veth1, "netns", ns1)
        for ns, veth, address in NAMESPACES:
            ip("-n", ns, "addr", "add", f"{address}/24", "dev", veth)
            ip("-n", ns, "link", "set", veth, "up")
            ip("-n", ns, "link", "set", "lo", "up")
        yield NAMESPACES
    finally:
        for ns, _, _ in NAMESPACES:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)


def two_host_run(name: str, work: Path, flags: list[str], port: int = 29477, timeout: int = 1800) -> dict:
    """The job as two machines: one torchrun per namespace, one rank each, meeting through c10d
    rendezvous on host 0's address; Gloo's TCP transport between the two namespaces' veth ends."""
    dump = work / "runs" / name
    shutil.rmtree(dump, ignore_errors=True)
    dump.mkdir(parents=True)
    commands, envs = [], []
    with two_hosts() as hosts:
        endpoint = f"{hosts[0][2]}:{port}"
        for index, (ns, veth, address) in enumerate(hosts):
            # is_host: torchrun finds out whether it serves the rendezvous by resolving the machine's
            # host name, which in a namespace (the same UTS namespace) names the real host, not the
            # veth's address; a machine with a second network card is told the same way.
            commands.append(["ip", "netns", "exec", ns, str(TORCHRUN), "--nnodes", "2", "--nproc-per-node", "1",
                             "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", name,
                             "--rdzv-conf", f"is_host={int(index == 0)}",
                             "--local-addr", address, str(LAUNCH), "openreg", *flags,
                             "--dump_folder", str(dump)])
            envs.append(environment("openreg", work, ifname=veth))
        run = run_logged(name, commands, envs, dump, timeout)
        # What crossed each veth end: the job's rendezvous, store and Gloo traffic.
        run["veth_bytes"] = {}
        for ns, veth, _ in hosts:
            stats = f"/sys/class/net/{veth}/statistics"  # `ip netns exec` mounts the namespace's /sys
            counts = subprocess.run(["ip", "netns", "exec", ns, "cat", f"{stats}/tx_bytes", f"{stats}/rx_bytes"],
                                    capture_output=True, text=True, check=True)
            tx, rx = (int(x) for x in counts.stdout.split())
            run["veth_bytes"][veth] = {"tx": tx, "rx": rx}
        return run


# -- comparison and report ---------------------------------------------------------------------------

def compare(title: str, ours: dict, oracle: dict, steps: list[int], atol: float) -> dict:
    rows = []
    for step in steps:
        a, b = ours["losses"].get(step), oracle["losses"].get(step)
        diff = None if a is None or b is None else abs(a - b)
        rows.append({"step": step, "openreg": a, "oracle": b, "diff": diff})
    worst = max((r["diff"] for r in rows if r["diff"] is not None), default=None)
    ok = all(r["diff"] is not None and r["diff"] <= atol for r in rows)
    bitwise = all(r["openreg"] is not None and r["openreg"] == r["oracle"] for r in rows)
    return {"title": title, "openreg_run": ours["name"], "oracle_run": oracle["name"], "rows": rows,
            "max_abs_diff": worst, "bitwise": bitwise, "ok": ok}


def _loss(value: float | None) -> str:
    return "missing" if value is None else f"{value:.7f}"


def report_markdown(comparisons: list[dict], runs: dict[str, dict], failures: list[str]) -> str:
    lines = ["# torchtitan on openreg against the CPU (make test-torchtitan)", ""]
    for c in comparisons:
        summary = (f"`{c['openreg_run']}` against `{c['oracle_run']}`: max |diff| {c['max_abs_diff']}, "
                   f"bitwise equal: {'yes' if c['bitwise'] else 'no'}")
        lines += [f"## {c['title']}", "", summary, "",
                  f"| step | {c['openreg_run']} | {c['oracle_run']} | abs diff |", "| ---: | ---: | ---: | ---: |"]
        for r in c["rows"]:
            diff = "missing" if r["diff"] is None else f"{r['diff']:.1e}"
            lines.append(f"| {r['step']} | {_loss(r['openreg'])} | {_loss(r['oracle'])} | {diff} |")
        lines.append("")
    lines += ["## Runs", "", "| run | wall time (s) | log |", "| --- | ---: | --- |"]
    for run in runs.values():
        lines.append(f"| {run['name']} | {run['seconds']} | {', '.join(run['logs'])} |")
    for run in runs.values():
        for veth, count in run.get("veth_bytes", {}).items():
            lines.append(f"\n{run['name']}: {veth} sent {count['tx']:,} bytes and received {count['rx']:,}")
    if failures:
        lines += ["", "## Failures", ""] + [f"- {f}" for f in failures]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--only", default=",".join(PARTS), help=f"comma-separated: {', '.join(PARTS)}")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--atol", type=float, default=0.0, help="largest loss difference accepted (0: bitwise)")
    args = parser.parse_args()
    parts = args.only.split(",")
    work = args.work.resolve()
    assets = work / "assets"
    write_assets(assets)
    seed = seed_checkpoint(work, assets)
    steps, half = args.steps, args.steps // 2
    flags = model_flags(assets, steps) + checkpoint_flags(seed, half)
    runs: dict[str, dict] = {}
    comparisons: list[dict] = []
    failures: list[str] = []

    def attempt(key: str, make) -> dict | None:
        try:
            runs[key] = make()
            return runs[key]
        except RunFailed as e:
            failures.append(str(e))
            return None
        except (subprocess.CalledProcessError, OSError) as e:  # `ip netns` without root, say
            failures.append(f"{key}: {e}")
            return None

    def resume(job: str, oracle: str, nproc: int, job_flags: list[str], devices: int) -> None:
        """A fresh job whose checkpoint folder holds only the uninterrupted openreg job's DCP
        checkpoint of step `half`: torchtitan loads the latest step there (model, optimizer,
        learning-rate schedule, data loader) and trains on to `steps`."""
        name = f"dcp-resume-{job}-openreg"
        staged = work / "dcp-staged" / job / "checkpoint"
        shutil.rmtree(staged.parent, ignore_errors=True)
        shutil.copytree(work / "runs" / f"{job}-openreg" / "checkpoint" / f"step-{half}", staged / f"step-{half}")
        resumed = attempt(name, lambda: torchrun(name, "openreg", work, nproc,
                                                 [*job_flags, "--checkpoint.folder", str(staged)], devices=devices))
        if not resumed:
            return
        after = list(range(half + 1, steps + 1))
        if sorted(resumed["losses"]) != after:
            failures.append(f"{name} logged steps {sorted(resumed['losses'])}, not {after}")
        comparisons.append(compare(f"DCP: {job} resumed at step {half} against the uninterrupted openreg run",
                                   resumed, runs[f"{job}-openreg"], after, args.atol))
        if runs.get(oracle):
            comparisons.append(compare(f"DCP: {job} resumed at step {half} against the CPU", resumed,
                                       runs[oracle], after, args.atol))

    if "fsdp" in parts or "dcp" in parts:
        fsdp = [attempt(f"fsdp-{d}", lambda d=d: torchrun(f"fsdp-{d}", d, work, 2, flags)) for d in ("openreg", "cpu")]
        if all(fsdp):
            comparisons.append(compare("FSDP2, 2 ranks", fsdp[0], fsdp[1], list(range(1, steps + 1)), args.atol))
    tp_flags = [*flags, "--parallelism.data_parallel_shard_degree", "2", "--parallelism.tensor_parallel_degree", "2"]
    if "tp" in parts or "dcp" in parts:
        tp = [attempt(f"fsdp-tp-{d}", lambda d=d: torchrun(f"fsdp-tp-{d}", d, work, 4, tp_flags, devices=4))
              for d in ("openreg", "cpu")]
        if all(tp):
            comparisons.append(compare("FSDP2 and tensor parallelism, 4 ranks (2 x 2)", tp[0], tp[1],
                                       list(range(1, steps + 1)), args.atol))
    if "dcp" in parts:
        for job, oracle, nproc, job_flags, devices in (("fsdp", "fsdp-cpu", 2, flags, 2),
                                                       ("fsdp-tp", "fsdp-tp-cpu", 4, tp_flags, 4)):
            if runs.get(f"{job}-openreg"):
                resume(job, oracle, nproc, job_flags, devices)
    if "two-hosts" in parts:
        two = attempt("two-hosts-openreg", lambda: two_host_run("two-hosts-openreg", work, flags))
        # The same job as FSDP2 on 2 ranks of one host: the CPU's run of this invocation, or of an
        # earlier one (--only two-hosts).
        oracle = runs.get("fsdp-cpu") or earlier_run(work, "fsdp-cpu")
        if two and oracle:
            comparisons.append(compare("Two hosts (network namespaces), FSDP2, 1 rank each", two,
                                       oracle, list(range(1, steps + 1)), args.atol))
        elif two:
            failures.append("two-hosts-openreg: no run fsdp-cpu to compare with (run --only fsdp first)")
    failures += [f"{c['title']}: losses differ by up to {c['max_abs_diff']} (atol {args.atol})"
                 for c in comparisons if not c["ok"]]
    (work / "report.json").write_text(json.dumps({"runs": runs, "comparisons": comparisons, "failures": failures},
                                                 indent=1) + "\n")
    report = report_markdown(comparisons, runs, failures)
    (work / "report.md").write_text(report)
    print(report)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
