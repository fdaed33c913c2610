"""PyTorch's device-generic tests through openreg's test base (torch_openreg/pytorch_test_base.py),
given to PyTorch with TORCH_TEST_DEVICES as a downstream device would give it: one test class per
generic class on openreg, the device argument an openreg device, and on torch 2.15 and later
`@requires_capabilities` running or skipping by openreg's declared capabilities."""

import json
import pathlib
import textwrap

import pytest
import torch
import torch.nn.functional as F

import torch_openreg
from conftest import run_python
from torch_openreg._compat import torch_before

TEST_BASE = pathlib.Path(torch_openreg.__file__).parent / "pytorch_test_base.py"

GENERIC_TESTS = """
    import sys, unittest
    import torch
    from torch.testing._internal import common_device_type as cdt
    from torch.testing._internal.common_utils import TestCase

    class TestProbe(TestCase):
        def test_device(self, device):
            self.assertEqual(torch.ones(2, device=device).device.type, "openreg")
            print("DEVICE", device)

        if hasattr(cdt, "requires_capabilities"):
            @cdt.requires_capabilities("dtype.bf16", "attention.flash_attention")
            def test_supported(self, device):
                print("RAN supported")

            @cdt.requires_capabilities("attention.mem_efficient_attention")
            def test_unsupported(self, device):
                print("RAN unsupported")

    cdt.instantiate_device_type_tests(TestProbe, globals(), only_for="privateuse1")
    print("CLASSES", sorted(n for n in globals() if n.startswith("TestProbe")))
    print("REQUIRES", hasattr(cdt, "requires_capabilities"))
    result = unittest.main(argv=["probe", "-v"], exit=False).result
    print("SKIPPED", [str(t[1]) for t in result.skipped])
    sys.exit(0 if result.wasSuccessful() else 1)
"""


def test_pytorchs_generic_tests_run_once_on_openreg_with_its_capabilities():
    result = run_python(textwrap.dedent(GENERIC_TESTS), env={"TORCH_TEST_DEVICES": str(TEST_BASE)})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    out = result.stdout
    assert "CLASSES ['TestProbePRIVATEUSE1']" in out
    assert out.count("DEVICE openreg:0") == 1
    if "REQUIRES True" in out:  # torch 2.15 and later
        assert "RAN supported" in out
        assert "RAN unsupported" not in out
        assert "unsupported capabilities: attention.mem_efficient_attention" in out


# Every capability identifier of the running torch's `Capability` namespace, each the one
# requirement of a generic test, run on the CPU and on openreg in one process; one JSON line per
# test: its device, capability and outcome (ran, skipped with the message, or the error's message).
CAPABILITY_PROBE = """
    import json, unittest
    from torch.testing._internal import common_device_type as cdt
    from torch.testing._internal.common_utils import TestCase

    CAPS = sorted(value for group in vars(cdt.Capability).values() if isinstance(group, type)
                  for name, value in vars(group).items() if not name.startswith("_"))

    def requiring(cap):
        @cdt.requires_capabilities(cap)
        def test(self, device):
            pass
        return test

    class TestCaps(TestCase):
        pass

    for cap in CAPS:
        setattr(TestCaps, "test_" + cap.replace(".", "_"), requiring(cap))

    cdt.instantiate_device_type_tests(TestCaps, globals(), only_for=("cpu", "privateuse1"))
    tests = [test for name in sorted(n for n in globals() if n.startswith("TestCaps"))
             for test in unittest.defaultTestLoader.loadTestsFromTestCase(globals()[name])]
    result = unittest.TestResult()
    unittest.TestSuite(tests).run(result)
    outcome = {test.id(): "ran" for test in tests}
    for test, reason in result.skipped:
        outcome[test.id()] = "skipped: " + reason
    for test, trace in result.errors + result.failures:
        outcome[test.id()] = "error: " + trace.strip().splitlines()[-1]
    for test_id, what in sorted(outcome.items()):
        cls, name = test_id.split(".")[-2:]
        device = "cpu" if cls.endswith("CPU") else "openreg"
        cap = next(c for c in CAPS if name.startswith("test_" + c.replace(".", "_") + "_"))
        print(json.dumps({"device": device, "cap": cap, "outcome": what}))
    print(json.dumps({"cuda_declares": sorted(cdt.CUDATestBase._capabilities())}))
"""


def _capability_outcomes(env: dict) -> tuple[dict, list[str]]:
    result = run_python(textwrap.dedent(CAPABILITY_PROBE), env=env)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    outcomes = {(r["device"], r["cap"]): r["outcome"] for r in lines if "device" in r}
    return outcomes, next(r["cuda_declares"] for r in lines if "cuda_declares" in r)


@pytest.mark.skipif(torch_before(2, 15), reason="@requires_capabilities is new in torch 2.15")
def test_a_test_requiring_any_capability_runs_or_skips_on_openreg_as_on_the_cpu():
    # On CUDA such a test runs or skips by what the platform supports (CUDATestBase._capabilities),
    # never raises. openreg declares every identifier PyTorch defines and every one CUDA declares,
    # each as the CPU, whose kernels it runs: the outcome is the CPU's, the skip's message too.
    outcomes, cuda_declares = _capability_outcomes({"TORCH_TEST_DEVICES": str(TEST_BASE)})
    caps = sorted({cap for _, cap in outcomes})
    assert set(cuda_declares) <= set(caps)
    for cap in caps:
        cpu, dev = outcomes["cpu", cap], outcomes["openreg", cap]
        assert not dev.startswith("error"), (cap, dev)
        assert dev == cpu.replace("'cpu'", "'openreg'"), (cap, cpu, dev)
    assert outcomes["openreg", "dtype.fp8"] == "ran"
    assert outcomes["openreg", "attention.mem_efficient_attention"].startswith("skipped")

    # Still needed on 2.15: the generic PrivateUse1TestBase declares nothing, so without openreg's
    # test base each of these tests fails with the AssertionError instead of running or skipping.
    generic, _ = _capability_outcomes({"TORCH_TEST_DEVICES": ""})
    assert all(generic["openreg", cap].startswith("error: AssertionError: Device 'openreg' has not "
                                                  "declared capabilities") for cap in caps), generic


def test_the_test_base_declares_each_capability_as_the_cpu_s_test_base():
    # Run as PyTorch runs it (runpy with common_device_type's globals), on every supported release:
    # the class it hands over is PrivateUse1TestBase with a _capabilities() of its own, a callable
    # per identifier, whose answers are those of the CPU's test base where the release has one.
    code = f"""
        import runpy
        from torch.testing._internal import common_device_type as cdt
        bases = list(cdt.device_type_test_bases)
        module = runpy.run_path({str(TEST_BASE)!r}, init_globals=dict(vars(cdt), device_type_test_bases=bases))
        cls = module["TEST_CLASS"]
        assert issubclass(cls, cdt.PrivateUse1TestBase) and cls is not cdt.PrivateUse1TestBase
        assert cdt.PrivateUse1TestBase not in bases
        assert "_capabilities" in vars(cls), "the test base declares no capabilities"
        declared = {{name: check() for name, check in cls._capabilities().items()}}
        assert declared == module["CAPABILITIES"], declared
        if hasattr(cdt.CPUTestBase, "_capabilities"):
            assert declared == cdt.CPUTestBase.get_capabilities() == cls.get_capabilities(), declared
        print("OK", sorted(declared))
    """
    result = run_python(textwrap.dedent(code), env={"TORCH_TEST_DEVICES": ""})
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "OK ['attention.flash_attention'" in result.stdout


def test_each_declared_capability_holds_on_openreg():
    # What the file declares true is checked against the CPU here, bitwise.
    x = torch.randn(16, 16)
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2, torch.bfloat16):
        cpu = (x.to(dtype).float() * 3).to(dtype)
        dev = (x.to("openreg").to(dtype).float() * 3).to(dtype)
        assert dev.dtype == dtype and torch.equal(dev.cpu().float(), cpu.float())
    q = torch.randn(2, 4, 32, 16)
    backend = torch.nn.attention.SDPBackend
    with torch.nn.attention.sdpa_kernel(backend.FLASH_ATTENTION):  # the CPU's flash kernel
        cpu = F.scaled_dot_product_attention(q, q, q, is_causal=True)
    with torch.nn.attention.sdpa_kernel(backend.OVERRIDEABLE):  # openreg's name for the same kernel
        dev = F.scaled_dot_product_attention(*(q.to("openreg"),) * 3, is_causal=True)
    assert torch.equal(dev.cpu(), cpu)


def test_the_testing_command_names_the_test_base():
    result = run_python("import runpy; runpy.run_module('torch_openreg.testing', run_name='__main__')", env={})
    assert result.returncode != 0  # a command is required
    printed = run_python(
        "import sys; sys.argv = ['x', 'pytorch-test-base']; import runpy; "
        "runpy.run_module('torch_openreg.testing', run_name='__main__')"
    )
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert printed.stdout.strip() == str(TEST_BASE.resolve())
