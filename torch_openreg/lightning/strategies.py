"""The strategies Trainer(accelerator="openreg") runs with: one device, and DDP on occl."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy, Strategy
from torch.nn.parallel import DistributedDataParallel

from .._C import DEVICE_NAME
from .precision import on_openreg


def _precision_property() -> property:
    """Strategy.precision_plugin whose setter moves Lightning's autocast plugin to openreg: Trainer
    sets the plugin it made from `precision=` on the strategy (accelerator_connector.py,
    _lazy_init_strategy), and for an accelerator other than the CPU or MPS that plugin autocasts
    on "cuda", which on a machine without CUDA disables autocast with a warning."""

    def setter(self: Strategy, plugin: Precision | None) -> None:
        self._precision_plugin = on_openreg(plugin)

    return property(Strategy.precision_plugin.fget, setter)


# [marker: lightning-single]
class SingleOpenRegStrategy(SingleDeviceStrategy):
    """Trainer(accelerator="openreg", devices=1, strategy="openreg_single"): Lightning's single-device
    strategy on an openreg device (default openreg:0) instead of the CPU it picks by itself."""

    strategy_name = "openreg_single"
    precision_plugin = _precision_property()

    def __init__(self, device: Any = f"{DEVICE_NAME}:0", **kwargs: Any) -> None:
        super().__init__(device=device, **kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        strategy_registry.register(cls.strategy_name, cls, description=cls.__name__)


# [marker: lightning-ddp]
class OpenRegDDPStrategy(DDPStrategy):
    """Trainer(accelerator="openreg", devices=N, strategy="openreg_ddp"): Lightning's DDP with the
    process group on occl (the openreg default of torch.distributed, docs/distributed.md). Lightning's
    DDPStrategy builds DistributedDataParallel inside `torch.cuda.stream(torch.cuda.Stream())`
    whenever it has device ids, which raises without CUDA; this builds it through torch.openreg."""

    strategy_name = "openreg_ddp"
    precision_plugin = _precision_property()

    def __init__(self, process_group_backend: str | None = "occl", **kwargs: Any) -> None:
        super().__init__(process_group_backend=process_group_backend, **kwargs)

    def _setup_model(self, model: torch.nn.Module) -> DistributedDataParallel:
        device_ids = self.determine_ddp_device_ids()
        # On the default stream, where the training step and AccumulateGrad run: DDP's broadcast of
        # the initial parameters is then ordered before the first step with no extra wait.
        with torch.openreg.stream(torch.openreg.default_stream(self.root_device.index)):
            return DistributedDataParallel(module=model, device_ids=device_ids, **self._ddp_kwargs)

    @classmethod
    def register_strategies(cls, strategy_registry: Any) -> None:
        for name, start_method in ((cls.strategy_name, "popen"), (cls.strategy_name + "_spawn", "spawn")):
            strategy_registry.register(
                name, cls, description=f"{cls.__name__} with start_method '{start_method}'", start_method=start_method
            )
