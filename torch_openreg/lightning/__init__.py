"""Lightning on openreg: `import torch_openreg.lightning` registers the accelerator "openreg" and the
strategies "openreg_single", "openreg_ddp" and "openreg_ddp_spawn" with Lightning's registries, so

    Trainer(accelerator="openreg", devices=2, strategy="openreg_ddp", precision="bf16-mixed")

trains on openreg devices, DDP on the occl backend, autocast on openreg (docs/ecosystem.md).
Needs the `lightning` package; importing this module without it raises ImportError.
"""

from lightning.pytorch.accelerators import AcceleratorRegistry
from lightning.pytorch.strategies import StrategyRegistry

from .accelerator import OpenRegAccelerator
from .precision import OpenRegPrecision
from .strategies import OpenRegDDPStrategy, SingleOpenRegStrategy


# [marker: lightning-registration]
def _register() -> None:
    """Adds the accelerator and strategies to Lightning's registries; safe to call more than once."""
    if OpenRegAccelerator.name() not in AcceleratorRegistry:
        OpenRegAccelerator.register_accelerators(AcceleratorRegistry)
    if SingleOpenRegStrategy.strategy_name not in StrategyRegistry:
        SingleOpenRegStrategy.register_strategies(StrategyRegistry)
    if OpenRegDDPStrategy.strategy_name not in StrategyRegistry:
        OpenRegDDPStrategy.register_strategies(StrategyRegistry)


_register()

__all__ = ["OpenRegAccelerator", "OpenRegDDPStrategy", "OpenRegPrecision", "SingleOpenRegStrategy"]
