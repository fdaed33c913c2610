"""How vLLM finds openreg (`make test-vllm`, docs/vllm.md): the `vllm.platform_plugins` entry point of
the installed package, the platform vLLM then builds, and the entry point's None where openreg
cannot run, so that vLLM falls back to another platform; the configuration the platform gives
vLLM's features."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
from importlib.metadata import entry_points

import pytest
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import tiny_models


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


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return tiny_models.build("llama", tmp_path_factory.mktemp("vllm-plugin") / "llama")


def _config(folder, **options):
    from vllm.engine.arg_utils import EngineArgs

    return EngineArgs(model=str(folder), dtype="float32", **options).create_engine_config()


def test_the_configuration_openreg_gives_each_feature(llama, caplog):
    """The feature table of docs/vllm.md as vLLM's configuration holds it after the platform's
    check_and_update_config, and the log line that says why for each feature turned off."""
    from vllm.config import CompilationMode, CUDAGraphMode

    with caplog.at_level("WARNING", logger="torch_openreg.vllm.platform"):
        config = _config(llama, async_scheduling=True, enable_chunked_prefill=True, enable_prefix_caching=True)
    logged = [r.getMessage() for r in caplog.records if r.name == "torch_openreg.vllm.platform"]
    assert not any("graphs disabled" in m for m in logged), logged
    assert any(m.startswith("openreg: async scheduling disabled: vLLM's model runner") for m in logged), logged
    assert config.parallel_config.worker_cls == "torch_openreg.vllm.worker.OpenRegWorker"
    assert config.scheduler_config.async_scheduling is False
    # vLLM's default graphs, kept (torch_openreg/vllm/graphs.py); none with more than one rank.
    assert config.compilation_config.cudagraph_mode == CUDAGraphMode.FULL_AND_PIECEWISE
    with caplog.at_level("WARNING", logger="torch_openreg.vllm.platform"):
        parallel = _config(llama, tensor_parallel_size=2)
    assert parallel.compilation_config.cudagraph_mode == CUDAGraphMode.NONE
    logged = [r.getMessage() for r in caplog.records if r.name == "torch_openreg.vllm.platform"]
    assert any(m.startswith("openreg: graphs disabled with more than one rank") for m in logged), logged
    assert config.compilation_config.mode == CompilationMode.VLLM_COMPILE
    assert config.compilation_config.backend == "inductor"
    assert config.scheduler_config.enable_chunked_prefill is True
    assert config.cache_config.enable_prefix_caching is True
    assert config.use_v2_model_runner is False
    assert _config(llama, enforce_eager=True).compilation_config.mode == CompilationMode.NONE


def test_building_the_configuration_leaves_openreg_uninitialized(llama):
    """What vLLM asks in the program's process before it forks its engine core (Note [vLLM's
    questions before its engine starts]): a fresh interpreter that builds the engine configuration
    has not initialized openreg."""
    code = (
        "import torch; from vllm.platforms import current_platform as p;"
        "from vllm.engine.arg_utils import EngineArgs;"
        "facts = (p.get_device_name(0), p.get_device_total_memory(0), p.get_device_capability(0));"
        f"EngineArgs(model={str(llama)!r}, dtype='float32', enforce_eager=True).create_engine_config();"
        "print(torch.openreg.is_initialized(), facts[1] == torch.openreg.get_device_properties(0).total_memory)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-2:] == ["False", "True"], result.stdout[-2000:]


def test_parallelism_needs_a_device_per_rank(llama):
    assert _config(llama, tensor_parallel_size=2).parallel_config.world_size == 2
    assert _config(llama, pipeline_parallel_size=2).parallel_config.world_size == 2
    words = "tensor_parallel_size 4 x pipeline_parallel_size 1 needs a device per rank, and there are 2"
    with pytest.raises(ValueError, match=words):
        _config(llama, tensor_parallel_size=4)
    with pytest.raises(ValueError, match="tensor_parallel_size 2 x pipeline_parallel_size 2 needs a device per rank"):
        _config(llama, tensor_parallel_size=2, pipeline_parallel_size=2)
