"""Execution engine against the CPU, in one run: time per operator call at a small size (host cost
dominates) and a large size (kernel time dominates), and per training step of an MLP.

Each figure is the median of 7 repeats; openreg timings include a final synchronize, so they
measure completed work. Prints a table and one JSON object (also written to argv[1] if given).
"""

import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F

REPEATS = 7


def per_call(fn, calls: int, device: str) -> float:
    samples = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        if device == "openreg":
            torch.openreg.synchronize()
        samples.append((time.perf_counter() - start) / calls)
    return statistics.median(samples)


def operator_cases(device: str, n: int):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device)
    b = torch.randn(n, n, generator=g).to(device)
    return {
        "add": lambda: a + b,
        "mul_": lambda: a.mul_(1.0),
        "relu": lambda: torch.relu(a),
        "sum": lambda: a.sum(),
        "mm": lambda: a @ b,
        "softmax": lambda: F.softmax(a, 1),
    }


def training_step(device: str):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(128, 256).to(device)
    y = torch.randint(0, 10, (128,)).to(device)

    def step():
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return step


def main() -> None:
    torch.openreg.init()
    results = []
    for n, calls in ((8, 2000), (512, 50)):
        cpu, dev = operator_cases("cpu", n), operator_cases("openreg", n)
        for name in cpu:
            t_cpu = per_call(cpu[name], calls, "cpu")
            t_dev = per_call(dev[name], calls, "openreg")
            results.append({"case": f"{name} {n}x{n}", "cpu_us": t_cpu * 1e6, "openreg_us": t_dev * 1e6,
                            "ratio": t_dev / t_cpu})
    t_cpu = per_call(training_step("cpu"), 20, "cpu")
    t_dev = per_call(training_step("openreg"), 20, "openreg")
    results.append({"case": "MLP training step (128x256, 512 hidden)", "cpu_us": t_cpu * 1e6,
                    "openreg_us": t_dev * 1e6, "ratio": t_dev / t_cpu})

    print(f"{'case':<42}{'CPU us':>12}{'openreg us':>14}{'openreg/CPU':>14}")
    for r in results:
        print(f"{r['case']:<42}{r['cpu_us']:>12.1f}{r['openreg_us']:>14.1f}{r['ratio']:>14.2f}")
    document = {"benchmark": "engine", "torch_threads": torch.get_num_threads(), "results": results}
    print(json.dumps(document))
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            json.dump(document, f)


if __name__ == "__main__":
    main()
