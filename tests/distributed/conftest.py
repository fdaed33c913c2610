"""The long multi-process tests: collected only under `make test-distributed`
(OPENREG_TEST_DISTRIBUTED=1), not by `make test`."""

import os

if os.environ.get("OPENREG_TEST_DISTRIBUTED") != "1":
    collect_ignore_glob = ["test_*.py"]
