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
             "(TensorIterator's device check)")
AT_SYNC = ("an error only the kernel can find from the data (an index out of bounds) is raised at "
           "the next synchronization, as CUDA's device-side asserts are; the test expects it at the call")

EXPECTED: dict[str, dict[str, str]] = {
    "TestShapeOps": {"test_flip_openreg_float32": QUANTIZED},
    "TestOldViewOps": {"test_flatten": QUANTIZED, "test_ravel": QUANTIZED},
    "TestSortAndSelect": {"test_stable_sort_against_numpy": CPU_INDEX},
    "TestTypePromotion": {
        "test_sparse_div": SPARSE, "test_sparse_div_promotion": SPARSE, "test_sparse_add": SPARSE,
        "test_sparse_sub": SPARSE, "test_sparse_mul": SPARSE,
    },
}

EXCLUDED: dict[str, list[str]] = {}
