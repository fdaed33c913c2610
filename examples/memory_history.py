"""`make demo`'s memory picture: a few training steps of the demo's classifier
(train_classifier.py), recorded with `torch.openreg.memory._record_memory_history()`.

Writes, into the folder given (default build/demo):
- memory_snapshot.pickle: the snapshot, for pytorch.org/memory_viz or `python -m torch.cuda._memory_viz`;
- memory_trace.html: PyTorch's visualizer of it (`torch.cuda._memory_viz.trace_plot`; the page loads
  the visualizer's script from a CDN);
- memory_timeline.svg: allocated and reserved bytes over time, drawn here, opening anywhere.
"""

import os
import pickle
import sys

import torch
import torch.nn.functional as F
from torch.cuda import _memory_viz

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_classifier import BATCH, build_model, make_images

from torch_openreg.openreg.debug import timeline, timeline_svg

STEPS = 4


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join("build", "demo")
    os.makedirs(out, exist_ok=True)
    images, labels = make_images(STEPS * BATCH, torch.Generator().manual_seed(1))
    torch.manual_seed(0)
    model = build_model().to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images, labels = images.to("openreg"), labels.to("openreg")

    memory = torch.openreg.memory
    torch.openreg.reset_peak_memory_stats(0)
    memory._record_memory_history(stacks="python")
    for step in range(STEPS):
        batch = slice(step * BATCH, (step + 1) * BATCH)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images[batch]), labels[batch])
        loss.backward()
        optimizer.step()
    torch.openreg.synchronize()
    snapshot = memory._snapshot()
    memory._record_memory_history(enabled=None)

    paths = {
        name: os.path.join(out, name) for name in ("memory_snapshot.pickle", "memory_trace.html", "memory_timeline.svg")
    }
    with open(paths["memory_snapshot.pickle"], "wb") as f:
        pickle.dump(snapshot, f)
    with open(paths["memory_trace.html"], "w") as f:
        f.write(_memory_viz.trace_plot(snapshot))
    with open(paths["memory_timeline.svg"], "w") as f:
        f.write(timeline_svg(snapshot, 0, title=f"openreg:0 memory, {STEPS} training steps of the demo's classifier"))

    points = timeline(snapshot, 0)
    events = len(snapshot["device_traces"][0])
    peak = max(p.allocated for p in points)
    print(
        f"\n== Memory history: {STEPS} training steps recorded, {events} allocator events with their Python stacks =="
    )
    print(
        f"peak allocated {peak / 2**20:.2f} MiB (allocator's peak statistic "
        f"{torch.openreg.max_memory_allocated(0) / 2**20:.2f} MiB), reserved {points[-1].reserved / 2**20:.1f} MiB"
    )
    for path in paths.values():
        print(f"  {path}")


if __name__ == "__main__":
    main()
