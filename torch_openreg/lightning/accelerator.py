"""`OpenRegAccelerator`: Lightning's accelerator for openreg devices, registered as "openreg"."""

from __future__ import annotations

from typing import Any

import torch
from lightning.pytorch.accelerators import Accelerator
from lightning.pytorch.strategies import DDPStrategy
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from .._C import DEVICE_NAME


def _parse_devices(devices: int | str | list[int] | tuple[int, ...]) -> list[int]:
    """Device indices from Trainer's `devices`: a count (-1 or "auto": all), a string of a count or of
    indices ("0,1"), or a list of indices. Raises for indices the process does not have."""
    count = torch.openreg.device_count()
    if isinstance(devices, str):
        text = devices.strip()
        if text in ("auto", "-1"):
            return list(range(count))
        devices = [int(part) for part in text.split(",") if part.strip()] if "," in text else int(text)
    if isinstance(devices, int):
        if devices == -1:
            return list(range(count))
        if not 0 < devices <= count:
            raise MisconfigurationException(
                f"Trainer(accelerator='{DEVICE_NAME}', devices={devices}): this process has {count} openreg devices "
                "(OPENREG_DEVICE_COUNT)"
            )
        return list(range(devices))
    indices = [int(index) for index in devices]
    wrong = [index for index in indices if not 0 <= index < count]
    if wrong or not indices:
        raise MisconfigurationException(
            f"Trainer(accelerator='{DEVICE_NAME}', devices={list(devices)}): valid indices are 0..{count - 1}"
        )
    return indices


# [marker: lightning-accelerator]
class OpenRegAccelerator(Accelerator):
    """Trainer(accelerator="openreg", ...). Lightning picks the strategy for an accelerator it does not
    know from a list of its own (its `SingleDeviceStrategy("cpu")` for one device, `DDPStrategy` for
    several, which needs CUDA streams), so the strategy is named too: "openreg_single" or
    "openreg_ddp" (torch_openreg/lightning/strategies.py). A strategy that puts the model anywhere
    else, or Lightning's DDPStrategy, raises here instead of training silently on the CPU or
    failing in torch.cuda."""

    def setup_device(self, device: torch.device) -> None:
        if device.type != DEVICE_NAME:
            raise MisconfigurationException(
                f"Trainer(accelerator='{DEVICE_NAME}') got the device {device} from its strategy: Lightning chooses "
                "SingleDeviceStrategy('cpu') for accelerators it does not know. Pass strategy='openreg_single' "
                "(one device) or strategy='openreg_ddp' (several) after `import torch_openreg.lightning`."
            )
        torch.openreg.set_device(device)

    def setup(self, trainer: Any) -> None:
        # Lightning's own DDPStrategy (strategy="ddp", or "auto" with several devices) would fail
        # later in torch.cuda.Stream; say which strategy works instead.
        from .strategies import OpenRegDDPStrategy

        strategy = trainer.strategy
        if isinstance(strategy, DDPStrategy) and not isinstance(strategy, OpenRegDDPStrategy):
            raise MisconfigurationException(
                f"Trainer(accelerator='{DEVICE_NAME}') cannot run Lightning's {type(strategy).__name__}: it builds "
                "DistributedDataParallel inside a CUDA stream. Pass strategy='openreg_ddp' (or "
                "'openreg_ddp_spawn') after `import torch_openreg.lightning`."
            )

    def teardown(self) -> None:
        # What CUDA's accelerator does at teardown: cached blocks go back to the device.
        torch.openreg.empty_cache()

    def get_device_stats(self, device: Any) -> dict[str, Any]:
        """The caching allocator's statistics (torch.openreg.memory_stats), what Lightning's
        DeviceStatsMonitor logs for CUDA."""
        return dict(torch.openreg.memory_stats(device))

    @staticmethod
    def parse_devices(devices: Any) -> list[int]:
        return _parse_devices(devices)

    @staticmethod
    def get_parallel_devices(devices: Any) -> list[torch.device]:
        return [torch.device(DEVICE_NAME, index) for index in _parse_devices(devices)]

    @staticmethod
    def auto_device_count() -> int:
        return torch.openreg.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.openreg.is_available()

    @staticmethod
    def name() -> str:
        return DEVICE_NAME

    @classmethod
    def register_accelerators(cls, accelerator_registry: Any) -> None:
        accelerator_registry.register(cls.name(), cls, description=cls.__name__)
