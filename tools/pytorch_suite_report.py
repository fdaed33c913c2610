"""Renders tools/pytorch_suite.py's results as markdown: the per-file table and the causes."""

from __future__ import annotations

import collections
import re

FAILED = ("failed", "crash", "timeout", "teardown-error", "xpassed")


def cause(message: str) -> str:
    """A failure message with its numbers, sizes and names of tests taken out, so failures of one
    cause group together."""
    message = re.sub(r"0x[0-9a-f]+", "0x…", message)
    message = re.sub(r"\d+(\.\d+)?", "N", message)
    message = re.sub(r"'[^']{20,}'", "'…'", message)
    return message[:140] or "(no message)"


def classify(data: dict, test_key) -> dict:
    """Per file: the counts of the table and the failing tests."""
    summary = {}
    for name, runs in data["files"].items():
        cpu = {test_key(t): r for t, r in runs["cpu"].items() if test_key(t)}
        dev = {test_key(t): (t, r) for t, r in runs["openreg"].items() if test_key(t)}
        counts = collections.Counter()
        failures = []
        for key, record in cpu.items():
            if record["outcome"] != "passed":
                continue
            if key not in dev:
                # Not instantiated for openreg: the test's dtype list for the CPU (dtypesIfCPU) is
                # not the one for other devices. Not a result of openreg's; counted apart.
                counts["not-instantiated"] += 1
                continue
            nodeid, result = dev[key]
            outcome = result["outcome"]
            if outcome == "skipped" and "Only runs on cpu" in result.get("message", ""):
                counts["cpu-only"] += 1  # @onlyCPU: the CPU's own behaviour, not openreg's
                continue
            if outcome in FAILED and runs["alone"].get(nodeid, {}).get("outcome") == "passed":
                outcome = "spoiled"
            counts["cpu_passed"] += 1
            counts[outcome] += 1
            if outcome in FAILED or outcome == "spoiled":
                failures.append((nodeid or key[0] + "::" + key[1], outcome,
                                 result.get("message", "")))
        extra = collections.Counter(r["outcome"] for k, (_, r) in dev.items() if k not in cpu
                                    or cpu[k]["outcome"] == "skipped")
        # Test time over the tests that ran on both (not skipped), so that openreg's extra tests
        # (accelerator-only ones) do not count against it.
        both = [k for k, r in cpu.items() if r["outcome"] != "skipped" and k in dev
                and dev[k][1]["outcome"] != "skipped"]
        cpu_seconds = sum(cpu[k].get("seconds", 0) for k in both)
        dev_seconds = sum(dev[k][1].get("seconds", 0) for k in both)
        summary[name] = {"counts": counts, "failures": failures, "extra": extra,
                         "wall": runs["wall"], "seconds": (cpu_seconds, dev_seconds),
                         "import_error": [r["message"] for r in runs["openreg"].values()
                                          if r["outcome"] == "import-error"]}
    return summary


def _commits(data: dict) -> str:
    """ at the commit each file ran at: one for the whole run, or per file after `--update`."""
    by_commit = collections.defaultdict(list)
    for name, runs in data["files"].items():
        by_commit[runs.get("commit")].append(name)
    if len(by_commit) == 1:
        commit = next(iter(by_commit))
        return f", at commit {commit}" if commit else ""
    return "; " + "; ".join(f"{', '.join(names)} at " + (f"commit {commit}" if commit else "an unrecorded commit")
                            for commit, names in by_commit.items())


def render(data: dict, test_key) -> str:
    summary = classify(data, test_key)
    lines = [
        "# PyTorch's device-generic tests on openreg",
        "",
        (f"torch {data['torch']}; files from `{data['tests_dir']}`{_commits(data)}. Written by "
         "`tools/pytorch_suite.py`; see docs/conformance.md."),
        "",
        ("| file | passed on CPU (and instantiated for openreg) | of those, passed on openreg "
         "| expected failures | failed | spoiled | crash/timeout | skipped only on openreg "
         "| openreg-only tests run (passed) "
         "| wall openreg ÷ CPU | same tests' time openreg ÷ CPU | CPU-only (@onlyCPU, dtype lists) |"),
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    total = collections.Counter()
    for name, s in summary.items():
        c = s["counts"]
        total.update(c)
        base = c["cpu_passed"] or 1
        wall = s["wall"]["openreg"] / max(s["wall"]["cpu"], 1e-9)
        test_time = s["seconds"][1] / max(s["seconds"][0], 1e-9)
        extra_run = sum(v for k, v in s["extra"].items() if k != "skipped")
        lines.append(
            f"| {name} | {c['cpu_passed']} | {c['passed']} ({100 * c['passed'] / base:.1f}%) "
            f"| {c['xfailed']} | {c['failed'] + c['xpassed'] + c['teardown-error']} | {c['spoiled']} "
            f"| {c['crash'] + c['timeout']} | {c['skipped']} "
            f"| {extra_run} ({s['extra']['passed']}) | {wall:.2f} | {test_time:.2f} "
            f"| {c['cpu-only']} + {c['not-instantiated']} |")
    base = total["cpu_passed"] or 1
    lines += ["", (f"Overall: {total['passed']} of {total['cpu_passed']} CPU-passing tests pass "
                   f"on openreg ({100 * total['passed'] / base:.2f}%); {total['xfailed']} are "
                   f"expected failures; {total['crash']} crashes, {total['timeout']} timeouts."), ""]
    for name, s in summary.items():
        if s["import_error"]:
            lines += [f"{name} does not import: {s['import_error'][0]}", ""]
    lines += ["## Failures by cause", "",
              "Tests that passed on the CPU and did not pass on openreg, grouped by message.", ""]
    by_cause = collections.defaultdict(list)
    for s in summary.values():
        for nodeid, outcome, message in s["failures"]:
            by_cause[(outcome, cause(message))].append(nodeid)
    for (outcome, text), tests in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"- {len(tests)} tests, {outcome}: `{text}`")
        for nodeid in sorted(tests)[:4]:
            lines.append(f"  - {nodeid}")
    return "\n".join(lines) + "\n"
