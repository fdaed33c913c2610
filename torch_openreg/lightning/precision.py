"""`OpenRegPrecision`: Lightning's mixed precision with autocast and gradient scaling on openreg."""

from __future__ import annotations

from typing import Literal

import torch
from lightning.pytorch.plugins.precision import MixedPrecision, Precision

from .._C import DEVICE_NAME


# [marker: lightning-precision]
class OpenRegPrecision(MixedPrecision):
    """`precision="bf16-mixed"` or `"16-mixed"` on openreg: `torch.autocast("openreg")` (CUDA's cast
    policy, docs/amp.md) and, for float16, `torch.amp.GradScaler("openreg")`, whose unscale and
    update are native kernels. Lightning makes a MixedPrecision for "cuda" from a precision string
    when the accelerator is not the CPU or MPS; the openreg strategies replace it with this."""

    def __init__(
        self,
        precision: Literal["16-mixed", "bf16-mixed"],
        scaler: torch.amp.GradScaler | None = None,
    ) -> None:
        if scaler is None and precision == "16-mixed":
            scaler = torch.amp.GradScaler(DEVICE_NAME)
        super().__init__(precision, device=DEVICE_NAME, scaler=scaler)


def on_openreg(plugin: Precision | None) -> Precision | None:
    """The plugin an openreg strategy uses for `plugin`: Lightning's autocast plugin made for another
    device becomes OpenRegPrecision with the same precision; every other plugin is kept."""
    if type(plugin) is MixedPrecision and plugin.device != DEVICE_NAME:
        return OpenRegPrecision(plugin.precision)
    return plugin
