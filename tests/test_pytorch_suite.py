"""tools/pytorch_suite.py on a small device-generic test file written here: each outcome the
runner tells apart (passed, failed, crash, spoiled by an earlier test, expected failure, unexpected
success, an accelerator-only test run on openreg) is produced on purpose and found in the report."""

import json
import pathlib
import subprocess
import sys
import textwrap

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent

TEST_FILE = '''
import os
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests, onlyCUDA
from torch.testing._internal.common_utils import TestCase, run_tests

SPOIL = {}


class TestSample(TestCase):
    def test_passes(self, device):
        self.assertEqual(torch.ones(3, device=device).sum().item(), 3.0)

    def test_fails_on_the_accelerator(self, device):
        self.assertEqual(torch.device(device).type, "cpu")

    def test_crashes_on_the_accelerator(self, device):
        if torch.device(device).type != "cpu":
            os.abort()

    def test_a_spoiling(self, device):
        SPOIL["on"] = torch.device(device).type != "cpu"

    def test_b_spoiled(self, device):
        self.assertFalse(SPOIL.get("on", False))

    def test_expected_to_fail(self, device):
        self.assertEqual(torch.device(device).type, "cpu")

    def test_expected_but_passes(self, device):
        pass

    @onlyCUDA
    def test_only_cuda(self, device):
        self.assertEqual(torch.zeros(2, device=device).tolist(), [0.0, 0.0])


instantiate_device_type_tests(TestSample, globals())


class TestNotDeviceGeneric(TestCase):  # runs on the CPU in both processes: not compared, not re-run
    def test_fails_everywhere(self):
        self.fail("no device")

    def test_passes_everywhere(self):
        pass

if __name__ == "__main__":
    run_tests()
'''

EXPECTED = '''
EXPECTED = {"TestSample": {"test_expected_to_fail": "reason", "test_expected_but_passes": "reason"}}
EXCLUDED = {}
'''


def test_the_runner_tells_each_outcome_apart(tmp_path):
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_sample.py").write_text(TEST_FILE)
    (tmp_path / "expected.py").write_text(EXPECTED)
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "pytorch_suite.py"), "--tests", str(tests),
         "--files", "test_sample.py", "--out", str(out), "--expected", str(tmp_path / "expected.py"),
         "--timeout", "120", "--name", "sample-suite"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["sample-suite.json", "sample-suite.md"]
    runs = json.loads((out / "sample-suite.json").read_text())["files"]["test_sample.py"]
    cls = "test_sample.py::TestSamplePRIVATEUSE1::"
    outcome = {t[len(cls):]: r["outcome"] for t, r in runs["openreg"].items() if t.startswith(cls)}
    assert outcome == {
        "test_passes_openreg": "passed",
        "test_fails_on_the_accelerator_openreg": "failed",
        "test_crashes_on_the_accelerator_openreg": "crash",
        "test_a_spoiling_openreg": "passed",
        "test_b_spoiled_openreg": "failed",
        "test_expected_to_fail_openreg": "xfailed",
        "test_expected_but_passes_openreg": "xpassed",
        "test_only_cuda_openreg": "passed",  # bypass_device_restrictions
    }
    cpu = {t.split("::")[-1]: r["outcome"] for t, r in runs["cpu"].items()}
    assert cpu["test_only_cuda_cpu"] == "skipped" and cpu["test_crashes_on_the_accelerator_cpu"] == "passed"
    # Alone, the spoiled test passes; the others fail again.
    alone = {t[len(cls):]: r["outcome"] for t, r in runs["alone"].items()}
    assert alone["test_b_spoiled_openreg"] == "passed"
    assert alone["test_fails_on_the_accelerator_openreg"] == "failed"
    assert not [t for t in runs["alone"] if "TestNotDeviceGeneric" in t]
    report = (out / "sample-suite.md").read_text()
    row = next(line for line in report.splitlines() if line.startswith("| test_sample.py"))
    # passed on CPU: 7 (all but only_cuda); on openreg 2 of them (passes, a_spoiling).
    assert row.split(" | ")[1:9] == ["7", "2 (28.6%)", "1", "2", "1", "1", "0", "1 (1)"], row
    assert textwrap.dedent("crash") in report


def test_another_release_s_run_uses_its_venv_and_writes_a_report_of_its_own():
    # `make conformance-pytorch TORCH=X.Y.Z`: the package reinstalled into that release's venv of
    # `make test-torch` (no build of the default tree), its report named by the minor release so
    # that the default release's conformance/pytorch-suite.md stays.
    dry = subprocess.run(["make", "-n", "conformance-pytorch", "TORCH=2.15.0", "PYTORCH_TESTS=/x", "JOBS=1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.replace("\\\n", "").splitlines()
    assert "scripts/test_torch.sh 2.15.0 --install-only" in lines
    run = next(line for line in lines if "tools/pytorch_suite.py" in line).split()
    assert run[:2] == ["PYTHONSAFEPATH=1", ".venv-torch-2.15.0/bin/python"]
    assert run[run.index("--name") + 1] == "pytorch-suite-2.15" and run[run.index("--out") + 1] == "conformance"
    assert not any(line.startswith("cmake") for line in lines)


def test_update_replaces_the_files_run_and_a_test_s_default_tensor_type_does_not_outlive_it(tmp_path):
    # A file re-run after a fix (`--files f.py --update`) replaces its own results; the other files'
    # stay, and the report names each file's commit. In the file, a test fails after setting a
    # default tensor type (as test_tensor_creation_ops' accelerator-only tests do with torch.cuda's
    # on a CUDA build without a GPU): the runner sets the type back, so the next test is not spoiled.
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_tiny.py").write_text(textwrap.dedent('''
        import torch
        from torch.testing._internal.common_device_type import instantiate_device_type_tests
        from torch.testing._internal.common_utils import TestCase

        class TestTiny(TestCase):
            def test_a_leaves_a_default_type(self, device):
                torch.set_default_tensor_type(torch.DoubleTensor)
                raise RuntimeError("failed before setting the type back")

            def test_b_ones(self, device):
                self.assertEqual(torch.tensor([1.0, 1.0]).dtype, torch.float32)
                self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)

        instantiate_device_type_tests(TestTiny, globals())
    '''))
    out = tmp_path / "out"
    out.mkdir()
    earlier = {"cpu": {}, "openreg": {}, "alone": {}, "wall": {"cpu": 1.0, "openreg": 1.0}, "rerun_skipped": 0}
    (out / "suite.json").write_text(json.dumps({"torch": torch.__version__, "tests_dir": str(tests),
                                                "files": {"test_earlier.py": earlier, "test_tiny.py": earlier}}))
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "pytorch_suite.py"), "--tests", str(tests), "--files", "test_tiny.py",
         "--out", str(out), "--name", "suite", "--update", "--timeout", "120"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    files = json.loads((out / "suite.json").read_text())["files"]
    assert files["test_earlier.py"] == earlier
    for device in ("cpu", "openreg"):
        outcome = {t.split("::")[-1]: r["outcome"] for t, r in files["test_tiny.py"][device].items()}
        assert outcome == {f"test_a_leaves_a_default_type_{device}": "failed", f"test_b_ones_{device}": "passed"}
    commit = files["test_tiny.py"]["commit"]
    report = (out / "suite.md").read_text()
    assert commit != "?" and "test_earlier.py at an unrecorded commit" in report
    assert f"test_tiny.py at commit {commit}" in report
