"""Meta kernels written in Python, for operators of the openreg namespace.

`openreg::custom_abs` has its schema and device kernels in C++ (csrc/aten/CustomOps.cpp) and its
Meta kernel here: Note [Custom operators]. The C++ library names this module
(`set_python_module`), so fake tensors (torch.compile, opcheck) find the kernel even before the
package imports it; the import in `torch_openreg.openreg` makes it available to Meta tensors too.
"""

import torch

_REAL_DTYPE = {torch.complex32: torch.float16, torch.complex64: torch.float32, torch.complex128: torch.float64}


# [marker: custom-abs-meta]
@torch.library.register_fake("openreg::custom_abs")
def _custom_abs_meta(input: torch.Tensor) -> torch.Tensor:
    # Contiguous, of the input's real dtype: what the C++ kernels return.
    return input.new_empty(input.shape, dtype=_REAL_DTYPE.get(input.dtype, input.dtype))
