"""The Dynamo device interface of openreg: what Dynamo and Inductor ask a device (its count, the
current device and stream, synchronization, properties, memory) without knowing its module.

Everything forwards to `torch.openreg`, so there is one implementation of each query.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._dynamo.device_interface import (
    DeviceInterface,
    caching_worker_current_devices,
    caching_worker_device_properties,
)

from .. import _C
from .._C import DEVICE_NAME
from ..openreg import DeviceProperties, _index


def _device_index(device: Any) -> int:
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != DEVICE_NAME:
            raise ValueError(f"{DEVICE_NAME}: expected an openreg device, got {device}")
        return device.index if device.index is not None else torch.openreg.current_device()
    return torch.openreg.current_device() if device is None else int(device)


# [marker: device-interface]
class OpenRegInterface(DeviceInterface):
    device = torch.openreg.device  # type: ignore[assignment]
    Event = torch.openreg.Event  # type: ignore[assignment]
    Stream = torch.openreg.Stream  # type: ignore[assignment]

    class Worker:
        """Answers from a compile worker process without touching the device (Inductor's
        workers may be forked): properties are recorded in the parent before the fork."""

        @staticmethod
        def set_device(device: int) -> None:
            caching_worker_current_devices[DEVICE_NAME] = device

        @staticmethod
        def current_device() -> int:
            if DEVICE_NAME in caching_worker_current_devices:
                return caching_worker_current_devices[DEVICE_NAME]
            return torch.openreg.current_device()

        @staticmethod
        def get_device_properties(device: Any = None) -> DeviceProperties:
            index = OpenRegInterface.Worker.current_device() if device is None else _device_index(device)
            if DEVICE_NAME not in caching_worker_device_properties:
                caching_worker_device_properties[DEVICE_NAME] = [
                    torch.openreg.get_device_properties(i) for i in range(torch.openreg.device_count())
                ]
            return caching_worker_device_properties[DEVICE_NAME][index]

    current_device = staticmethod(torch.openreg.current_device)
    set_device = staticmethod(torch.openreg.set_device)
    device_count = staticmethod(torch.openreg.device_count)
    stream = staticmethod(torch.openreg.stream)  # type: ignore[assignment]
    current_stream = staticmethod(torch.openreg.current_stream)
    set_stream = staticmethod(torch.openreg.set_stream)  # type: ignore[assignment]
    synchronize = staticmethod(torch.openreg.synchronize)
    memory_allocated = staticmethod(torch.openreg.memory_allocated)

    @staticmethod
    def _set_stream_by_id(stream_id: int, device_index: int, device_type: int) -> None:
        _C._set_stream(stream_id, device_index, device_type)

    @staticmethod
    def exchange_device(device: int) -> int:
        return _C._exchange_device(device)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        return _C._exchange_device(device) if device >= 0 else -1

    @staticmethod
    def is_available() -> bool:
        return torch.openreg.is_available()

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        """The runtime handle of the device's current stream (openreg stream ids are handles)."""
        return torch.openreg.current_stream(_index(device_idx)).stream_id

    @staticmethod
    def get_device_properties(device: Any = None) -> DeviceProperties:
        return torch.openreg.get_device_properties(device)

    @staticmethod
    def get_compute_capability(device: Any = None) -> str:
        # Inductor compiles C++ for the host's vector ISA, which it detects itself (as for "cpu").
        return ""

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def is_triton_capable(device: Any = None) -> bool:
        return False

    @staticmethod
    def raise_if_triton_unavailable(device: Any = None) -> None:
        raise RuntimeError(f"{DEVICE_NAME}: Triton has no openreg backend; Inductor compiles C++ kernels for openreg")


def get_raw_stream(device_idx: int) -> int:
    """What generated wrappers import as `get_raw_stream` for openreg (OpenRegDeviceOpOverrides)."""
    return OpenRegInterface.get_raw_stream(device_idx)


from . import ready  # noqa: E402  (Note [Registration when Dynamo and Inductor load])

ready(__name__)
