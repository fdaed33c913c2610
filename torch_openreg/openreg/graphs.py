"""Graphs of `torch.openreg`, named as `torch.cuda` names them.

`Graph` is `torch.accelerator.Graph` (the backend's implementation is `csrc/core/GraphImpl.cpp`) with
`torch.cuda.CUDAGraph`'s `capture_begin(pool=None, capture_error_mode="global")`; `graph` is the
context manager `torch.cuda.graph` is. See docs/graphs.md.
"""

from __future__ import annotations

import gc
from typing import Any

import torch

from .. import _C


class Graph(torch.accelerator.Graph):
    """A captured stream of openreg work, replayed with one launch.

    `Graph(keep_graph=False)`: with `keep_graph=True` the captured graph stays after
    `capture_end()` (for `instantiate()` and `debug_dump()`).
    """

    def __new__(cls, keep_graph: bool = False, **kwargs: Any) -> Graph:
        return super().__new__(cls, keep_graph)

    def __init__(self, keep_graph: bool = False, **kwargs: Any) -> None:
        super().__init__(keep_graph, **kwargs)

    def capture_begin(self, pool: tuple[int, int] | None = None, capture_error_mode: str = "global") -> None:
        """Begins capturing the current stream's work, allocating from `pool` (a
        `graph_pool_handle()` or another graph's `pool()`; a new pool when None)."""
        self.graph_pool = pool
        self.capture_error_mode = capture_error_mode
        super().capture_begin()


# [marker: graph-context]
class graph:
    """Captures the work of its body into `openreg_graph`, as `torch.cuda.graph` does.

    The capture runs on `stream` (default: a side stream of the current device, shared by all
    captures on it), after a device synchronization, a garbage collection and `empty_cache()`;
    `pool` and `capture_error_mode` as in `Graph.capture_begin`. The previous current stream is
    restored on exit, even when the capture fails.
    """

    default_capture_streams: dict[int, torch.Stream] = {}  # noqa: RUF012  (shared on purpose)

    def __init__(
        self,
        openreg_graph: Graph | torch.accelerator.Graph,
        pool: tuple[int, int] | None = None,
        stream: torch.Stream | None = None,
        capture_error_mode: str = "global",
    ) -> None:
        from . import Stream, current_device

        if stream is None:
            index = current_device()
            if index not in graph.default_capture_streams:
                graph.default_capture_streams[index] = Stream()
            stream = graph.default_capture_streams[index]
        self.pool = pool
        self.capture_stream = stream
        self.graph = openreg_graph
        self.capture_error_mode = capture_error_mode

    def __enter__(self) -> None:
        from . import empty_cache, stream, synchronize

        synchronize()
        gc.collect()
        empty_cache()
        self.stream_ctx = stream(self.capture_stream)
        self.stream_ctx.__enter__()
        try:
            self.graph.graph_pool = self.pool
            self.graph.capture_error_mode = self.capture_error_mode
            torch.accelerator.Graph.capture_begin(self.graph)
        except BaseException:
            self.stream_ctx.__exit__(None, None, None)
            raise

    def __exit__(self, *exc_info: Any) -> None:
        try:
            self.graph.capture_end()
        finally:
            self.stream_ctx.__exit__(*exc_info)


def graph_pool_handle() -> tuple[int, int]:
    """A new memory-pool id that graphs can share (pass it as `pool`)."""
    return _C._graph_pool_handle()


def is_current_stream_capturing() -> bool:
    """Whether the current stream of the current device is capturing a graph."""
    return _C._is_current_stream_capturing()


__all__ = ["Graph", "graph", "graph_pool_handle", "is_current_stream_capturing"]
