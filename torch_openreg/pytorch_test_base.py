"""openreg's device test base for PyTorch's own device-generic tests (docs/testing-libraries.md).

    TORCH_TEST_DEVICES=$(python -m torch_openreg.testing pytorch-test-base) python test/test_ops.py

PyTorch's extension point for another test device is `TORCH_TEST_DEVICES` (Note [How to extend
DeviceTypeTestBase to add new test device] in torch/testing/_internal/common_device_type.py): that
module runs this file with its own globals and adds its `TEST_CLASS` to the device test bases. So
this file does not import common_device_type; `PrivateUse1TestBase` and `device_type_test_bases`
are those globals, and it defines the test base only when run so (`__name__` is runpy's
"<run_path>"). Imported as a module, it only names its own path.

What it adds to the generic PrivateUse1TestBase: `_capabilities()`, which torch 2.15's
`@requires_capabilities` asks (a test base without it fails such a test with an AssertionError
instead of running or skipping it). openreg runs the CPU's kernels in device memory, so it declares
what the CPU's test base declares, each checked by tests/test_pytorch_test_base.py against openreg
itself: float8 and bfloat16 compute as on the CPU, and scaled_dot_product_attention takes the CPU's
flash kernel where the CPU does (docs/attention.md); no memory-efficient kernel, as on the CPU.
"""

import pathlib

# The file to give TORCH_TEST_DEVICES (`python -m torch_openreg.testing pytorch-test-base` prints it).
PATH = pathlib.Path(__file__).resolve()

# The capability identifiers of torch 2.15's `Capability` namespace, as strings: the class is not
# in older releases' globals, and a release that has no `requires_capabilities` never asks.
CAPABILITIES = {
    "dtype.fp8": True,
    "dtype.bf16": True,
    "attention.flash_attention": True,
    "attention.mem_efficient_attention": False,
}

if __name__ == "<run_path>":  # run by common_device_type for TORCH_TEST_DEVICES
    import torch_openreg  # noqa: F401  (the device exists before the tests are instantiated)

    class OpenRegTestBase(PrivateUse1TestBase):  # noqa: F821  (from common_device_type's globals)
        """PrivateUse1TestBase with openreg's capabilities; tests keep their PRIVATEUSE1 class names."""

        @classmethod
        def _capabilities(cls):
            return {name: (lambda supported=supported: supported) for name, supported in CAPABILITIES.items()}

    # The generic base would instantiate every test a second time, under the same class name.
    if PrivateUse1TestBase in device_type_test_bases:  # noqa: F821
        device_type_test_bases.remove(PrivateUse1TestBase)  # noqa: F821

    TEST_CLASS = OpenRegTestBase
