"""PyTorch's device-generic tests that do not pass on openreg, each with its reason.

Read by tools/pytorch_suite_plugin.py, which hands them to PyTorch's own hooks on
`PrivateUse1TestBase`. Every reason is a design decision written in docs/conformance.md
("Expected failures"); a test that fails for any other reason is a bug to fix, not an entry here.

EXPECTED: generic test class -> {test name: reason}. The name is the generic test (`test_foo`:
every dtype and variant) or one instantiated variant (`test_foo_openreg_float16`). The test is
wrapped in `unittest.expectedFailure`: a fix shows up as an unexpected success, which fails.
EXCLUDED: generic test class -> test names not instantiated at all (`test_exclusions`), for tests
that cannot be run in a shared process, with the reason in a comment.
"""

from __future__ import annotations

QUANTIZED = "quantized tensors are refused on openreg (docs/operators.md, Note [No quantized tensors])"
SPARSE = "openreg tensors are strided: sparse layouts are refused (docs/conformance.md)"
CPU_INDEX = ("a CPU index tensor of an openreg operator outside indexing is refused, as on CUDA "
             "(TensorIterator's device check); the test itself skips this part on CUDA")
AT_SYNC = ("an error only the kernel can find from the data (an index out of bounds, a mask's count, "
           "a std tensor's values) is raised at the next synchronization, as CUDA's device-side "
           "asserts are (docs/errors.md); the test expects it at the call")
STORAGE_CLASS = ("storage_type() names torch.openreg.<Name>Storage, as CUDA's names torch.cuda's; the "
                 "test expects the CPU's classes on every device but CUDA")
CPU_ONLY_API = "Tensor.map_ and map2_ call Python per element and take CPU tensors only, on CUDA too"
FAST_PATH = ("torch.nn's TransformerEncoderLayer takes its fast path on the PrivateUse1 device as on "
             "CPU and CUDA (torch/nn/modules/transformer.py, _supported_device_type), so a fully masked "
             "row gives NaN as on the CPU; the test expects the slow path's zeros on every device but "
             "CPU and CUDA")
CPU_KERNELS = ("openreg computes with the CPU's kernels, which interpolate uint8 (bilinear, bicubic); the "
               "test expects CUDA's refusal on every device but the CPU")
NESTED = ("nested tensors (torch.nested, the transformer fast path's input) have no openreg kernels: "
          "refused, as sparse layouts are (docs/conformance.md)")

EXPECTED: dict[str, dict[str, str]] = {
    "TestShapeOps": {"test_flip_openreg_float32": QUANTIZED},
    "TestOldViewOps": {"test_flatten": QUANTIZED, "test_ravel": QUANTIZED},
    "TestSortAndSelect": {"test_stable_sort_against_numpy": CPU_INDEX},
    "TestIndexing": {
        # Its float16 variant returns before the out-of-bounds part; the file exempts CUDA by is_cuda.
        "test_advancedindex_openreg_float64": AT_SYNC,
    },
    "NumpyTests": {
        "test_trivial_fancy_out_of_bounds": AT_SYNC,
        "test_boolean_assignment_value_mismatch": AT_SYNC,
    },
    "TestTypePromotion": {
        "test_sparse_div": SPARSE, "test_sparse_div_promotion": SPARSE, "test_sparse_add": SPARSE,
        "test_sparse_sub": SPARSE, "test_sparse_mul": SPARSE,
    },
    "TestTensorCreation": {"test_tensor_ctor_device_inference": SPARSE},
    "TestRandomTensorCreation": {"test_normal_std_error": AT_SYNC},
    "TestTorchDeviceType": {
        "test_masked_scatter": AT_SYNC,
        "test_memory_format_empty_like": SPARSE,
        "test_tensor_storage_type": STORAGE_CLASS,
        "test_broadcast_fn_map": CPU_ONLY_API,
        "test_broadcast_fn_map2": CPU_ONLY_API,
    },
    "TestNNDeviceType": {
        "test_one_hot": AT_SYNC,
        "test_TransformerEncoderLayer_empty": NESTED,
        "test_transformerencoderlayer": FAST_PATH,
        **{
            f"test_upsamplingBiMode2d_nonsupported_dtypes_antialias_{aa}_num_channels_{c}_mode_{mode}_uint8"
            "_openreg_uint8": CPU_KERNELS
            for aa in (False, True)
            for c in (3, 5)
            for mode in ("bicubic", "bilinear")
        },
    },
}

EXCLUDED: dict[str, list[str]] = {}
