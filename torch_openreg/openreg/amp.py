"""`torch.openreg.amp`: mixed precision on openreg, shaped like `torch.cuda.amp`.

`autocast` is `torch.autocast("openreg")` with openreg's defaults, and `GradScaler` is
`torch.amp.GradScaler("openreg")`. The cast policy is CUDA's (Note [Autocast policy] in
csrc/aten/Autocast.cpp); see docs/amp.md.
"""

from __future__ import annotations

import torch

from .._C import DEVICE_NAME

__all__ = ["GradScaler", "autocast"]


# [marker: amp-autocast]
class autocast(torch.amp.autocast):
    """`torch.autocast("openreg", ...)`. `dtype=None` takes `torch.get_autocast_dtype("openreg")`
    (float16 unless set); openreg supports float16 and bfloat16 (`get_amp_supported_dtype`)."""

    def __init__(
        self,
        enabled: bool = True,
        dtype: torch.dtype | None = None,
        cache_enabled: bool = True,
    ) -> None:
        super().__init__(DEVICE_NAME, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(torch.amp.GradScaler):
    """`torch.amp.GradScaler("openreg", ...)`."""

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__(DEVICE_NAME, init_scale, growth_factor, backoff_factor, growth_interval, enabled)
