"""Memory of `torch.openreg`: the caching allocator's statistics and controls, shaped like
`torch.cuda.memory`. The numbers come from the allocator behind `torch.accelerator`'s memory API
(csrc/core/allocator/), in the same key names as CUDA's."""

from __future__ import annotations

from collections import OrderedDict
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


__all__ = [
    "empty_cache",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_snapshot",
    "memory_stats",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
]
