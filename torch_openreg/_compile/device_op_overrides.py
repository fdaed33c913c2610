"""What Inductor's Python wrapper writes for openreg around a graph's kernels: the device guard,
setting the device, synchronizing, the current stream (`register_device_op_overrides`)."""

from __future__ import annotations

from torch._inductor.codegen.common import DeviceOpOverrides, register_device_op_overrides

from .._C import DEVICE_NAME


# [marker: device-op-overrides]
class OpenRegDeviceOpOverrides(DeviceOpOverrides):
    """What the Python wrapper writes around an openreg graph's kernels."""

    def import_get_raw_stream_as(self, name: str) -> str:
        return f"from torch_openreg._compile.device_interface import get_raw_stream as {name}"

    def set_device(self, device_idx: int) -> str:
        return f"torch.openreg.set_device({device_idx})"

    def synchronize(self) -> str:
        return "torch.openreg.synchronize()"

    def device_guard(self, device_idx: int) -> str:
        return f"torch.openreg.device({device_idx})"

    def current_stream(self) -> str:
        return "torch.openreg.current_stream()"

    def cpp_kernel_type(self) -> str:
        return "void*"


def register() -> None:
    register_device_op_overrides(DEVICE_NAME, OpenRegDeviceOpOverrides())


from . import ready  # noqa: E402  (Note [Registration when Dynamo and Inductor load])

ready(__name__)
