"""Streams and events of `torch.openreg`: thin subclasses of `torch.Stream` and `torch.Event`.

All behaviour comes from the backend's DeviceGuardImplInterface (csrc/core/impl/GuardImpl.cpp),
so an `openreg.Stream` is also a `torch.Stream`, usable with `torch.accelerator` and
`torch.Stream`'s own methods (query, synchronize, wait_event, wait_stream, record_event).
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C
from .._C import DEVICE_NAME


def _device_index(device: Any) -> int:
    from . import _index

    return _index(device)


def _wrap(triple: tuple[int, int, int]) -> Stream:
    stream_id, device_index, device_type = triple
    return Stream(stream_id=stream_id, device_index=device_index, device_type=device_type)


class Stream(torch.Stream):
    """An in-order queue of work on one openreg device.

    `Stream(device=None, priority=0)` takes a stream from the device's pool; priority -1 is served
    before priority 0. `with stream:` makes it current.
    """

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> Stream:
        if "stream_id" in kwargs:  # wrapping an existing stream
            return super().__new__(cls, **kwargs)
        from . import _lazy_init

        _lazy_init()
        index = _device_index(device)
        return super().__new__(cls, device=torch.device(DEVICE_NAME, index), priority=priority)

    @property
    def priority(self) -> int:
        """-1 (served first) or 0."""
        return _C._stream_priority(self.stream_id, self.device_index)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, torch.Stream) and super().__eq__(other)

    def __hash__(self) -> int:
        return super().__hash__()

    def __repr__(self) -> str:
        return f"<torch.openreg.Stream device=openreg:{self.device_index} id={self.stream_id}>"


class _EventMeta(type):
    def __instancecheck__(cls, obj: object) -> bool:
        return isinstance(obj, torch.Event) and obj.device.type == DEVICE_NAME


class Event(metaclass=_EventMeta):
    """A point in a stream: record it, query or wait for it, time between two of them.

    `Event(enable_timing=False, blocking=False)` returns a `torch.Event` of the openreg device:
    PyTorch's own event methods (record_event, elapsed_time) accept only exact torch.Event
    objects, so this class makes them rather than subclassing. `isinstance(e, Event)` holds for
    every openreg torch.Event.
    """

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> torch.Event:
        if interprocess:
            raise NotImplementedError(f"{DEVICE_NAME}: interprocess events are not supported yet")
        return torch.Event(device=DEVICE_NAME, enable_timing=enable_timing, blocking=blocking)


def current_stream(device: Any = None) -> Stream:
    """The calling thread's current stream on `device` (default: the current device)."""
    return _wrap(_C._get_current_stream(_device_index(device)))


def default_stream(device: Any = None) -> Stream:
    """The default stream of `device`: the stream current until another is set."""
    return _wrap(_C._get_default_stream(_device_index(device)))


def set_stream(stream: torch.Stream) -> None:
    """Makes `stream` current, and its device the current device, as torch.cuda.set_stream does.

    A stream of another device type raises ValueError naming its type (csrc/core/OpenRegStream.cpp)."""
    if stream is None:
        return
    _C._set_stream(stream.stream_id, stream.device_index, stream.device_type)


class StreamContext:
    """Makes `stream` current (and its device) inside the block; restores both on exit."""

    def __init__(self, stream: torch.Stream | None):
        self.stream = stream
        self.prev_device = -1
        self.prev_stream: Stream | None = None
        self.prev_stream_on_target: Stream | None = None

    def __enter__(self) -> torch.Stream | None:
        if self.stream is None:
            return None
        self.prev_device = _C._get_device()
        self.prev_stream = current_stream(self.prev_device)
        self.prev_stream_on_target = current_stream(self.stream.device_index)
        set_stream(self.stream)
        return self.stream

    def __exit__(self, *args: Any) -> bool:
        if self.stream is not None:
            set_stream(self.prev_stream_on_target)
            set_stream(self.prev_stream)
        return False


def stream(stream: torch.Stream | None) -> StreamContext:
    return StreamContext(stream)
