"""`torch.openreg._gpu_trace`: the callback registries PyTorch's GPU trace fires for the openreg
device (Note [Device trace] in csrc/core/DeviceTrace.h). PyTorch's C++ looks them up by these
names in `torch.<device>._gpu_trace`, as `torch.cuda._gpu_trace` holds CUDA's. Used by
`torch.openreg.debug.stream_sanitizer`."""

from torch._utils import CallbackRegistry

EventCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg event creation")
EventDeletionCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg event deletion")
EventRecordCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("openreg event record")
EventWaitCallbacks: "CallbackRegistry[int, int]" = CallbackRegistry("openreg event wait")
MemoryAllocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg memory allocation")
MemoryDeallocationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg memory deallocation")
StreamCreationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg stream creation")
DeviceSynchronizationCallbacks: "CallbackRegistry[[]]" = CallbackRegistry("openreg device synchronization")
StreamSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg stream synchronization")
EventSynchronizationCallbacks: "CallbackRegistry[int]" = CallbackRegistry("openreg event synchronization")
