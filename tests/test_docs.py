"""Every code citation in docs/ (`path#marker`) points at a file and marker that exist."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_cited_marker_exists():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_doc_markers.py")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert ", 0 failed" in result.stdout
