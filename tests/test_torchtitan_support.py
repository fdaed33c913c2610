"""What `make test-torchtitan` works around (docs/torchtitan.md), each pinned by a test that fails
once the workaround can go: torchtitan itself is not installed here, only the torch behaviour that
made each one necessary is checked."""

import pytest
import torch
import torch.distributed as dist

from conftest import run_python
from torch_openreg._compat import torch_before


def test_set_timeout_is_still_missing_before_torch_2_14():
    # Note [set_timeout before torch 2.14] in tests/libraries/torchtitan_launch.py: torchtitan 0.3.0
    # calls torch.distributed.set_timeout after its first step. 2.13 lacks it and 2.14 has it; when
    # the oldest supported release has it, _add_set_timeout can go.
    assert hasattr(dist, "set_timeout") == (not torch_before(2, 14))
    assert hasattr(dist.ProcessGroup, "set_timeout")


def test_flex_attention_still_trains_on_neither_device():
    # Note [The debug model's attention] in tests/libraries/torchtitan_configs.py: torchtitan's
    # language models need FlexAttention (or CUDA's varlen attention). When FlexAttention's backward
    # runs on the CPU and on openreg, the debug model can keep its own attention.
    from torch.nn.attention.flex_attention import flex_attention

    for device, error in (("cpu", NotImplementedError), ("openreg", ValueError)):
        q = torch.randn(1, 2, 16, 8, device=device, requires_grad=True)
        with pytest.raises(error, match="FlexAttention"):
            flex_attention(q, q, q)


def test_premul_sum_still_refused_on_openreg():
    # Note [FSDP2's reduce-scatter without PREMUL_SUM] in tests/libraries/torchtitan_configs.py: occl
    # refuses PREMUL_SUM as Gloo does. When it works, the workaround can go. (DTensor's random
    # operators on openreg, the other refusal this suite met, are torch_openreg/_dtensor_random.py's
    # and tests/test_distributed.py's.)
    result = run_python(
        """
        import torch, torch.distributed as dist
        torch.openreg.set_device(0)
        dist.init_process_group("occl", store=dist.HashStore(), rank=0, world_size=1)
        out = torch.zeros(4, device="openreg")
        try:
            dist.reduce_scatter_tensor(out, torch.ones(4, device="openreg"), op=dist._make_nccl_premul_sum(1.0))
            print("premul_sum: works")
        except (RuntimeError, ValueError) as e:
            print("premul_sum:", "refused" if "PREMUL_SUM" in str(e) else e)
        dist.destroy_process_group()
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[:1] == ["premul_sum: refused"], result.stdout
