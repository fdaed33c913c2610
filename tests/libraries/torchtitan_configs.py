"""torchtitan config registry for `make test-torchtitan` (docs/torchtitan.md).

torchtitan's `--module` takes a fully qualified module path besides its own model names and
`--config` a function in it (`torchtitan/config/manager.py`). This module is put on PYTHONPATH by
`tests/libraries/torchtitan_suite.py` and run as

    torchrun ... -m torchtitan.train --module torchtitan_configs --config llama3_debugmodel_sdpa ...

See Note [The debug model's attention].
"""

from torch.distributed.fsdp import FSDPModule
from torchtitan.experiments.graph_trainer.common_utils import build_decoder_config_for_backend
from torchtitan.models.llama3 import llama3_configs, model_registry
from torchtitan.models.llama3.config_registry import llama3_debugmodel
from torchtitan.models.llama3.parallelize import parallelize_llama
from torchtitan.trainer import Trainer

# Note [The debug model's attention]
# torchtitan 0.3.0 builds its language models with FlexAttention (the default), FlexAttention's
# flash variant or varlen attention, and refuses SDPA for them (`get_attention_config`,
# torchtitan/models/common/config_utils.py). None of the three trains on the CPU under torch
# 2.13.0: FlexAttention refuses a backward on CPU tensors and any tensor of a device outside
# {cuda, cpu, xpu, hpu, mps} (`_validate_device`, torch/nn/attention/flex_attention.py), and varlen
# attention calls the CUDA flash kernels. torchtitan's own tests meet the same wall for other
# reasons and swap each layer's inner attention for `ScaledDotProductAttention` (causal, no
# per-document mask) with `build_decoder_config_for_backend(..., "sdpa")`
# (torchtitan/experiments/graph_trainer/common_utils.py). We take that function and otherwise keep
# the debug model and its trainer config (`llama3_debugmodel`) and the core llama3 parallelization
# (FSDP2's fully_shard, tensor parallelism with DTensor). Both the CPU and openreg run this model.
# `tests/test_torchtitan_support.py` fails once FlexAttention trains on both devices, which is when
# this config can go.


# Note [FSDP2's reduce-scatter without PREMUL_SUM]
# torchtitan divides the gradients by the global token count itself and sets FSDP2's gradient
# divide factor to 1.0 (`disable_fsdp_gradient_division`, torchtitan/distributed/fsdp.py). With a
# factor that is not the group's size, FSDP2 reduce-scatters with `ReduceOp.PREMUL_SUM(1/factor)`
# (`_get_gradient_divide_factors`, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py), an
# NCCL operation that Gloo refuses ("Cannot use ReduceOp.PREMUL_SUM with Gloo"), and so does occl,
# which is Gloo on device memory (docs/distributed.md). FSDP2's own switch
# `set_force_sum_reduction_for_comms(True)` asks for SUM and a division by the factor after the
# collective instead; by 1.0, which FSDP2 skips. Multiplying by 1.0 changes no float, so SUM is
# the same result PREMUL_SUM(1.0) gives on NCCL. The switch is set on every FSDP module right after
# torchtitan's own parallelization, on both devices.


def parallelize_llama_sum_reduction(model, **kwargs):
    model = parallelize_llama(model, **kwargs)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
    return model


def llama3_debugmodel_sdpa() -> Trainer.Config:
    config = llama3_debugmodel()
    spec = model_registry("debugmodel")
    spec.model = build_decoder_config_for_backend(llama3_configs["debugmodel"], "sdpa")
    spec.parallelize_fn = parallelize_llama_sum_reduction
    config.model_spec = spec
    return config
