"""Memory of `torch.openreg`: the caching allocator's statistics and controls, shaped like
`torch.cuda.memory`. The numbers come from the allocator behind `torch.accelerator`'s memory API
(csrc/core/allocator/), in the same key names as CUDA's."""

from __future__ import annotations

import contextlib
import warnings
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import torch

from .. import _C
from ._memory_history import _dump_snapshot, _record_memory_history, _snapshot  # noqa: F401


def _index(device: Any) -> int:
    from . import _index as index

    return index(device)


def memory_stats(device: Any = None) -> OrderedDict[str, Any]:
    """All allocator statistics of a device, flattened ("allocated_bytes.all.current", ...), with
    the graphs' private pools as torch.cuda.memory_stats flattens them
    ("reserved_bytes_by_private_pools.0_1.all.current")."""
    index = _index(device)
    stats = torch.accelerator.memory_stats(index)
    for pool, types in _C._reserved_bytes_by_private_pools(index).items():
        for kind, values in types.items():
            for name, value in values.items():
                stats[f"reserved_bytes_by_private_pools.{pool[0]}_{pool[1]}.{kind}.{name}"] = value
    return stats


def memory_stats_as_nested_dict(device: Any = None) -> dict[str, Any]:
    """`memory_stats` as nested dictionaries ({"allocated_bytes": {"all": {"current": ...}}}), the
    shape `torch.cuda.memory_stats_as_nested_dict` returns; the private pools' keys stay "0_1"."""
    nested: dict[str, Any] = {}
    for key, value in memory_stats(device).items():
        *parents, leaf = key.split(".")
        node = nested
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return nested


def memory_allocated(device: Any = None) -> int:
    """Bytes held by tensors on the device."""
    return torch.accelerator.memory_allocated(_index(device))


def max_memory_allocated(device: Any = None) -> int:
    return torch.accelerator.max_memory_allocated(_index(device))


def memory_reserved(device: Any = None) -> int:
    """Bytes the caching allocator holds from the device (tensors plus cache)."""
    return torch.accelerator.memory_reserved(_index(device))


def max_memory_reserved(device: Any = None) -> int:
    return torch.accelerator.max_memory_reserved(_index(device))


def memory_cached(device: Any = None) -> int:
    """Deprecated in torch.cuda, kept because libraries still call it: `memory_reserved`."""
    warnings.warn("torch.openreg.memory_cached has been renamed to memory_reserved", FutureWarning, stacklevel=2)
    return memory_reserved(device)


def max_memory_cached(device: Any = None) -> int:
    """Deprecated in torch.cuda, kept because libraries still call it: `max_memory_reserved`."""
    warnings.warn(
        "torch.openreg.max_memory_cached has been renamed to max_memory_reserved", FutureWarning, stacklevel=2
    )
    return max_memory_reserved(device)


def _reset_peaks_as(name: str, device: Any) -> None:
    warnings.warn(
        f"torch.openreg.{name} now calls reset_peak_memory_stats, which resets all peak memory statistics",
        FutureWarning,
        stacklevel=3,
    )
    reset_peak_memory_stats(device)


def reset_max_memory_allocated(device: Any = None) -> None:
    """Deprecated in torch.cuda (it resets every peak, as here): `reset_peak_memory_stats`."""
    _reset_peaks_as("reset_max_memory_allocated", device)


def reset_max_memory_cached(device: Any = None) -> None:
    """Deprecated in torch.cuda (it resets every peak, as here): `reset_peak_memory_stats`."""
    _reset_peaks_as("reset_max_memory_cached", device)


def reset_peak_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_peak_memory_stats(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    torch.accelerator.reset_accumulated_memory_stats(_index(device))


def empty_cache() -> None:
    """Returns every fully free cached segment, on every device, to the device."""
    if torch.openreg.is_initialized():
        torch.accelerator.empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """(free, total) bytes of the device, as the device sees them (cached memory is not free)."""
    return torch.accelerator.get_memory_info(_index(device))


def device_memory_used(device: Any = None) -> int:
    """Bytes of the device in use (total minus free): the device's own count, where CUDA asks the
    driver's management library. Memory cached by the allocator is in use."""
    free, total = mem_get_info(device)
    return total - free


def get_allocator_backend() -> str:
    """The allocator behind openreg tensors: "native", the caching allocator (csrc/core/allocator/);
    there is no other backend to choose."""
    return "native"


def memory_snapshot() -> list[dict[str, Any]]:
    """Every segment of every device, with its blocks (address, size, state), as CUDA reports them."""
    return _C._memory_snapshot()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A table of the device's allocator statistics, current, peak and accumulated."""
    index = _index(device)
    stats = memory_stats(index)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Active memory", "active_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Reserved memory", "reserved_bytes", True),
        ("Non-releasable memory", "inactive_split_bytes", True),
        ("Allocations", "allocation", False),
        ("Active allocs", "active", False),
        ("Reserved segments", "segment", False),
        ("Non-releasable allocs", "inactive_split", False),
    ]

    def fmt(value: int, is_bytes: bool) -> str:
        if not is_bytes:
            return str(value)
        for unit in ("B", "KiB", "MiB", "GiB"):
            if abs(value) < 1024 or unit == "GiB":
                return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
            value /= 1024
        return str(value)

    pools = ["all"] if abbreviated else ["all", "large_pool", "small_pool"]
    lines = [
        f"openreg memory summary, device {index}",
        f"{'metric':<28}{'current':>14}{'peak':>14}{'allocated':>14}{'freed':>14}",
    ]
    for title, key, is_bytes in rows:
        for pool in pools:
            label = title if pool == "all" else f"  from {pool.replace('_', ' ')}"
            values = [stats.get(f"{key}.{pool}.{part}", 0) for part in ("current", "peak", "allocated", "freed")]
            lines.append(f"{label:<28}" + "".join(f"{fmt(v, is_bytes):>14}" for v in values))
    free, total = mem_get_info(index)
    lines.append(
        f"device allocations {stats.get('num_device_alloc', 0)}, device frees "
        f"{stats.get('num_device_free', 0)}, OOMs {stats.get('num_ooms', 0)}, "
        f"device memory free {fmt(free, True)} of {fmt(total, True)}"
    )
    return "\n".join(lines)


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """Caps the caching allocator's segments on `device` at `fraction` of its capacity, as
    torch.cuda's does: an allocation past the cap raises torch.OutOfMemoryError."""
    _C._set_memory_fraction(float(fraction), _index(device))


def get_per_process_memory_fraction(device: Any = None) -> float:
    return _C._get_memory_fraction(_index(device))


def _set_allocator_settings(settings: str) -> None:
    """Sets allocator keys at run time, in PYTORCH_OPENREG_ALLOC_CONF's syntax
    ("max_split_size_mb:64,garbage_collection_threshold:0.8"); the keys not named keep their
    values. An unknown key or a bad value raises ValueError naming it."""
    _C._set_allocator_settings(settings)


def _get_allocator_settings() -> str:
    return _C._get_allocator_settings()


class MemPool:
    """A private pool of device memory the program names, as torch.cuda.MemPool: allocations made
    under `use_mem_pool(pool)` come from it and go back to it, never to the shared cache, and a
    graph captured with `pool=pool.id` allocates into it too. The pool's memory returns to the
    device once the MemPool is gone and its tensors are freed (then `empty_cache()`)."""

    def __init__(self, allocator: Any = None, use_on_oom: bool = False, device: Any = None) -> None:
        if allocator is not None:
            raise ValueError("torch.openreg.MemPool: openreg has no pluggable allocators; pass allocator=None")
        if use_on_oom:
            raise ValueError("torch.openreg.MemPool: use_on_oom is not supported on openreg")
        self._device = _index(device)
        self._id = tuple(_C._mempool_create(self._device))

    @property
    def id(self) -> tuple[int, int]:
        return self._id

    @property
    def allocator(self) -> None:
        return None

    def use_count(self) -> int:
        """The pool's users: this MemPool, each `use_mem_pool` in progress, each graph."""
        return _C._mempool_use_count(self._device, self._id)

    def snapshot(self) -> list[dict[str, Any]]:
        """The pool's segments, as `memory_snapshot()` gives them."""
        return [s for s in memory_snapshot() if tuple(s["segment_pool_id"]) == self._id]

    def __del__(self) -> None:
        if getattr(self, "_id", None) is not None and _C is not None:
            _C._mempool_release(self._device, self._id)


@contextlib.contextmanager
def use_mem_pool(pool: MemPool, device: Any = None) -> Iterator[None]:
    """Routes this thread's allocations on `device` (the current one by default) to `pool`."""
    index = _index(device)
    _C._mempool_begin(index, pool.id)
    try:
        yield
    finally:
        _C._mempool_end(index, pool.id)


__all__ = [
    "MemPool",
    "device_memory_used",
    "empty_cache",
    "get_allocator_backend",
    "get_per_process_memory_fraction",
    "max_memory_allocated",
    "max_memory_cached",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_cached",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_peak_memory_stats",
    "set_per_process_memory_fraction",
    "use_mem_pool",
]
