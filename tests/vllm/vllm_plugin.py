"""How vLLM finds openreg (`make test-vllm`, docs/vllm.md): the `vllm.platform_plugins` entry point of
the installed package, the platform vLLM then builds, and the entry point's None where openreg
cannot run, so that vLLM falls back to another platform."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import entry_points

import torch


def test_the_installed_entry_point_names_the_openreg_platform():
    (plugin,) = [p for p in entry_points(group="vllm.platform_plugins") if p.name == "openreg"]
    assert plugin.value == "torch_openreg_autoload:vllm_platform"
    assert plugin.load()() == "torch_openreg.vllm.platform.OpenRegPlatform"


def test_vllm_builds_the_openreg_platform():
    from vllm.platforms import current_platform

    assert type(current_platform).__name__ == "OpenRegPlatform"
    assert current_platform.is_out_of_tree()
    assert (current_platform.device_type, current_platform.dispatch_key) == ("openreg", "PrivateUse1")
    assert current_platform.get_device_total_memory(0) == torch.openreg.mem_get_info(0)[1]


def test_without_a_device_the_entry_point_answers_none_and_vllm_falls_back():
    code = (
        "import torch_openreg_autoload as a; print(a.vllm_platform());"
        "from vllm.platforms import current_platform; print(type(current_platform).__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, "OPENREG_DEVICE_COUNT": "0"},
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["None", "UnspecifiedPlatform"], result.stdout
