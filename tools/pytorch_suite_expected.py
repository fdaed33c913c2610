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

EXPECTED: dict[str, dict[str, str]] = {}

EXCLUDED: dict[str, list[str]] = {}
