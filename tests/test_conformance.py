"""The OpInfo conformance sweep (tools/conformance.py): its reduced form over a representative
subset of operators, and the sweep's own machinery: comparison, sample replicas, and workers that
crash or hang without taking the sweep down. CPU is the oracle; see docs/conformance.md."""

import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent / "tools"))
import conformance
import conformance_report
import conformance_worker

# The targets for the share of samples that pass (bitwise, close or both raising).
FORWARD_TARGET, BACKWARD_TARGET = 0.98, 0.95


def test_reduced_sweep_has_no_wrong_result_no_crash_and_meets_the_pass_targets(capsys):
    plan = conformance.make_plan(reduced=True)
    assert len(plan) == len(conformance.REDUCED)  # every name in the subset is a real OpInfo
    records = conformance.sweep(plan, jobs=2)
    result = conformance_report.coverage(records, {})
    with capsys.disabled():
        for op, dtype, direction, entry in conformance_report.entries_with(result):
            for category in conformance_worker.FAILURES:
                if entry[category]:
                    r = entry["reasons"][category]
                    print(f"\n{category}: {op} {dtype} {direction} {entry[category]}/{entry['samples']} "
                          f"sample {r['sample']}: {r['reason']}\n    {r['input']}")
    forward, backward = result["summary"]["forward"], result["summary"]["backward"]
    assert forward["samples"] > 1000 and backward["samples"] > 300
    assert forward["wrong"] == 0 and backward["wrong"] == 0
    assert forward["crash"] == 0 and backward["crash"] == 0
    assert forward["pass_rate"] >= FORWARD_TARGET, forward
    assert backward["pass_rate"] >= BACKWARD_TARGET, backward


def test_a_worker_that_crashes_or_hangs_is_replaced_and_the_sweep_goes_on(monkeypatch):
    monkeypatch.setenv("OPENREG_CONFORMANCE_FAULT", "abs=crash,exp=hang")
    plan = {
        "abs": [["float32", "forward"]],
        "exp": [["float32", "forward"]],
        "neg": [["float32", "forward"]],
    }
    records = conformance.sweep(plan, jobs=2, timeout=3)
    crash = records[("abs", "float32", "forward")]
    assert crash.counts["crash"] == 1 and "SIGABRT" in crash.reasons["crash"]["reason"]
    hang = records[("exp", "float32", "forward")]
    assert hang.counts["crash"] == 1 and "timeout" in hang.reasons["crash"]["reason"]
    neg = records[("neg", "float32", "forward")]
    assert neg.samples > 0 and neg.counts["bitwise"] == neg.samples


def test_compare_tells_bitwise_from_close_from_wrong():
    a = torch.tensor([1.0, float("nan"), -0.0])
    assert conformance_worker.compare(a, a.clone()) == ("bitwise", None)
    assert conformance_worker.compare(a, torch.tensor([1.0, float("nan"), 0.0]))[0] == "bitwise"
    assert conformance_worker.compare(a, a + torch.tensor([1e-7, 0, 0]))[0] == "close"
    category, reason = conformance_worker.compare(a, a + 1)
    assert category == "wrong" and "not close" in reason
    assert conformance_worker.compare(a, a.double())[0] == "wrong"  # dtypes must match
    assert conformance_worker.compare((a, 3, None), (a.clone(), 3, None))[0] == "bitwise"


def test_sample_replicas_keep_strides_offsets_and_leaves():
    base = torch.arange(24.0).view(4, 6)
    view = base[1:, ::2].t()  # offset, transposed, strided
    copy = conformance_worker.replicate(view, "openreg")
    assert copy.device.type == "openreg"
    assert copy.stride() == view.stride() and copy.storage_offset() == view.storage_offset()
    assert torch.equal(copy.cpu(), view)
    expanded = torch.randn(3, 1).expand(3, 4).requires_grad_()
    leaf = conformance_worker.replicate(expanded, "openreg")
    assert leaf.stride() == (1, 0) and leaf.is_leaf and leaf.requires_grad
    args = conformance_worker.replicate((torch.device("cpu"), {"device": "cpu"}), "openreg")
    assert args == (torch.device("openreg"), {"device": "openreg"})

