"""PyTorch's device-generic tests through openreg's test base (torch_openreg/pytorch_test_base.py),
given to PyTorch with TORCH_TEST_DEVICES as a downstream device would give it: one test class per
generic class on openreg, the device argument an openreg device, and on torch 2.15 and later
`@requires_capabilities` running or skipping by openreg's declared capabilities."""

import pathlib
import textwrap

import torch
import torch.nn.functional as F

import torch_openreg
from conftest import run_python

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
