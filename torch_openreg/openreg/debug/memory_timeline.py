"""Memory over time from a memory-history snapshot (`torch.openreg.memory._snapshot()`), as numbers
and as a self-contained SVG picture: no plotting library, no network (the visualizer's HTML loads
its script from a CDN; this picture opens anywhere).

The trace records changes only, so the level before the first entry is recovered from the
snapshot's end state: the bytes in blocks the snapshot lists, minus the trace's net change. So the
last point equals the allocator's statistics when the snapshot was taken (`allocated_bytes`,
`reserved_bytes`), and the highest equals their peak if it was reset when recording started
(`tests/test_memory_history.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from ..._C import DEVICE_NAME


@dataclass
class Point:
    time_us: int
    allocated: int  # bytes in tensors (alloc .. free_requested): memory_allocated()
    reserved: int  # bytes in segments (segment_alloc .. segment_free): memory_reserved()


# [marker: memory-timeline]
def timeline(snapshot: dict[str, Any], device: int = 0) -> list[Point]:
    """One point per trace entry of `device`, after that entry."""
    trace = snapshot["device_traces"][device] if device < len(snapshot["device_traces"]) else []
    segments = [s for s in snapshot["segments"] if s["device"] == device]
    allocated_now = sum(b["size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
    reserved_now = sum(s["total_size"] for s in segments)
    step = {"alloc": (1, 0), "free_requested": (-1, 0), "segment_alloc": (0, 1), "segment_free": (0, -1)}
    net_allocated = sum(e["size"] * step.get(e["action"], (0, 0))[0] for e in trace)
    net_reserved = sum(e["size"] * step.get(e["action"], (0, 0))[1] for e in trace)
    allocated, reserved = allocated_now - net_allocated, reserved_now - net_reserved
    points = []
    for e in trace:
        da, dr = step.get(e["action"], (0, 0))
        allocated += da * e["size"]
        reserved += dr * e["size"]
        points.append(Point(e["time_us"], allocated, reserved))
    return points


def _mib(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def timeline_svg(
    snapshot: dict[str, Any], device: int = 0, title: str = "", width: int = 900, height: int = 320
) -> str:
    """An SVG line chart of reserved and allocated bytes of `device` over the recorded time."""
    points = timeline(snapshot, device)
    left, right, top, bottom = 80, 20, 36, 40
    w, h = width - left - right, height - top - bottom
    out = [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            'font-family="sans-serif" font-size="12">'
        ),
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left}" y="20" font-size="14">{escape(title or f"{DEVICE_NAME}:{device} memory over time")}</text>',
    ]
    if not points:
        out.append(f'<text x="{left}" y="{top + h / 2}">no allocator events recorded</text></svg>')
        return "\n".join(out)
    t0, t1 = points[0].time_us, max(points[-1].time_us, points[0].time_us + 1)
    ymax = max(max(p.reserved, p.allocated) for p in points) or 1

    def xy(t: int, v: int) -> str:
        return f"{left + (t - t0) / (t1 - t0) * w:.1f},{top + h - v / ymax * h:.1f}"

    for i in range(5):  # horizontal grid with byte labels
        v = ymax * i / 4
        y = top + h - v / ymax * h
        out.append(f'<line x1="{left}" x2="{left + w}" y1="{y:.1f}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">{_mib(v)}</text>')
    out.append(f'<text x="{left}" y="{height - 12}">0 ms</text>')
    out.append(f'<text x="{left + w}" y="{height - 12}" text-anchor="end">{(t1 - t0) / 1000:.1f} ms</text>')
    for key, color in (("reserved", "#1f77b4"), ("allocated", "#d62728")):
        coords = []
        previous = None
        for p in points:  # a step line: each value holds until the next event
            if previous is not None:
                coords.append(xy(p.time_us, getattr(previous, key)))
            coords.append(xy(p.time_us, getattr(p, key)))
            previous = p
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{" ".join(coords)}"/>')
    peak = max(p.allocated for p in points)
    out.append(
        f'<text x="{left + w}" y="20" text-anchor="end">'
        f'<tspan fill="#1f77b4">reserved (last {_mib(points[-1].reserved)})</tspan>'
        f'  <tspan fill="#d62728">allocated (peak {_mib(peak)})</tspan></text>'
    )
    out.append("</svg>")
    return "\n".join(out)
