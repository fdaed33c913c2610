"""vLLM's torch.compile on openreg: the post-grad pass manager the platform names
(`OpenRegPlatform.get_pass_manager_cls`).

vLLM compiles a model's graph in pieces between attention calls and hands each piece to Inductor,
which compiles openreg graphs through torch_openreg's registration (docs/compile.md). Its post-grad
pass manager ends with FixFunctionalizationPass, which names `torch.ops._C.rotary_embedding`, an
operator of vLLM's CUDA extension (vllm/_C_stable_libtorch.abi3.so, which needs libcuda to load).
Without that extension the pass raises AttributeError for every graph, so ours skips it:
Inductor then removes the functionalization wrappers itself (its own post-grad
`decompose_auto_functionalized`), at the price of the copies vLLM's pass saves.
"""

from __future__ import annotations

import torch
from vllm.compilation.passes.pass_manager import PostGradPassManager
from vllm.compilation.passes.utility.fix_functionalization import FixFunctionalizationPass


class _InductorDefunctionalizes(FixFunctionalizationPass):
    def __call__(self, graph: torch.fx.Graph) -> None:
        return


# [marker: vllm-pass-manager]
class OpenRegPassManager(PostGradPassManager):
    """vLLM's pass manager with FixFunctionalizationPass left to Inductor (see the module's note)."""

    def configure(self, config) -> None:
        super().configure(config)
        self.fix_functionalization = _InductorDefunctionalizes(config)
