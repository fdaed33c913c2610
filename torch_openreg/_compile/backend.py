"""The Dynamo backend "openreg": `torch.compile(model, backend="openreg")`.

It is Inductor, which compiles openreg graphs through the registration in inductor.py; the name
exists so that code written for PyTorch's in-tree openreg reference, which selects its backend by
name, runs unchanged. `torch.compile(model)` (Inductor by default) does the same on openreg
tensors.
"""

from __future__ import annotations

from typing import Any


# [marker: dynamo-backend]
def openreg(gm: Any, example_inputs: Any, **kwargs: Any) -> Any:
    from torch._inductor.compile_fx import compile_fx

    return compile_fx(gm, example_inputs, **kwargs)
