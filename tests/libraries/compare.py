#!/usr/bin/env python3
"""Compares a library's test runs on the CPU and on openreg, test by test, from their JUnit files.

    python tests/libraries/compare.py RESULTS MODEL [MODEL ...]

RESULTS holds <model>-cpu.xml and <model>-openreg.xml (pytest --junitxml), as
tests/libraries/transformers_suite.py writes them. Prints a Markdown report: per model, the tests
that pass on the CPU, how many of those pass on openreg, and every one that does not, with its
outcome on openreg and the first line of its error. The CPU is the oracle: a test that fails on the
CPU says nothing about openreg and is only counted.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path

RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 2}


def outcomes(xml: Path) -> dict[str, tuple[str, str]]:
    """test id -> (passed | failed | error | skipped, first line of the message)."""
    if not xml.exists():
        return {}
    found = {}
    for case in ET.parse(xml).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        outcome, line = "passed", ""
        for kind in ("failure", "error", "skipped"):
            child = case.find(kind)
            if child is not None:
                outcome = {"failure": "failed"}.get(kind, kind)
                line = first_line(child)
                break
        # A test with subtests can have several entries: any failure fails it, else any pass passes it.
        if test_id not in found or RANK[outcome] > RANK[found[test_id][0]]:
            found[test_id] = (outcome, line)
    return found


def first_line(element: ET.Element) -> str:
    """The exception's line: pytest's message attribute, else the first `E ` line of the traceback."""
    message = (element.get("message") or "").strip()
    if message:
        return message.splitlines()[0][:300]
    for line in (element.text or "").splitlines():
        if line.startswith("E "):
            return line[1:].strip()[:300]
    return ""


def compare(results: Path, model: str) -> dict:
    cpu = outcomes(results / f"{model}-cpu.xml")
    openreg = outcomes(results / f"{model}-openreg.xml")
    cpu_passing = [t for t, (o, _) in cpu.items() if o == "passed"]
    remainder = []
    for test in cpu_passing:
        outcome, line = openreg.get(test, ("not run", "no result in the openreg run (crash or timeout)"))
        if outcome != "passed":
            remainder.append((test, outcome, line))
    # Tests the CPU run skips (@require_torch_accelerator and the like) that run on openreg: no oracle,
    # but a failure there is worth reading.
    accelerator_only = [(t, o, line) for t, (o, line) in openreg.items()
                        if cpu.get(t, ("",))[0] == "skipped" and o != "skipped"]
    return {
        "model": model,
        "accelerator_only_passing": sum(1 for _, o, _ in accelerator_only if o == "passed"),
        "accelerator_only_failing": [(t, o, line) for t, o, line in accelerator_only if o != "passed"],
        "collected": len(cpu),
        "cpu_passing": len(cpu_passing),
        "openreg_passing": len(cpu_passing) - len(remainder),
        "cpu_failing": sum(1 for o, _ in cpu.values() if o in ("failed", "error")),
        "skipped": sum(1 for o, _ in cpu.values() if o == "skipped"),
        "openreg_only_passing": sum(1 for t, (o, _) in openreg.items() if o == "passed" and t not in cpu_passing),
        "remainder": remainder,
        "complete": bool(cpu) and bool(openreg),
    }


def report(results: Path, models: list[str]) -> str:
    rows = [compare(results, m) for m in models]
    lines = [
        (
            "| model | tests | skipped on the CPU | failing on the CPU | CPU-passing | passing on openreg | remainder "
            "| skipped on the CPU, run on openreg: passed / not |"
        ),
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    total_cpu = total_openreg = 0
    for r in rows:
        note = "" if r["complete"] else " (a run has no result)"
        lines.append(
            f"| {r['model']}{note} | {r['collected']} | {r['skipped']} | {r['cpu_failing']} | {r['cpu_passing']} | "
            f"{r['openreg_passing']} | {len(r['remainder'])} | "
            f"{r['accelerator_only_passing']} / {len(r['accelerator_only_failing'])} |"
        )
        total_cpu += r["cpu_passing"]
        total_openreg += r["openreg_passing"]
    if total_cpu:
        lines.append(f"\n{total_openreg} of {total_cpu} CPU-passing tests pass on openreg "
                     f"({100 * total_openreg / total_cpu:.2f}%).")
    for r in rows:
        if r["remainder"]:
            lines.append(f"\n### {r['model']}: CPU-passing, not passing on openreg\n")
            lines += [f"- `{test}`: {outcome}: {line}" for test, outcome, line in r["remainder"]]
        if r["accelerator_only_failing"]:
            lines.append(f"\n### {r['model']}: skipped on the CPU, not passing on openreg\n")
            lines += [f"- `{test}`: {outcome}: {line}" for test, outcome, line in r["accelerator_only_failing"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    print(report(Path(sys.argv[1]), sys.argv[2:]))
