"""DTensor's random operators on openreg meshes. docs/design.md ("Patches of torch") lists it with the
other patches of torch; docs/distributed.md says what a program gets.

# [marker: dtensor-random-patch]
Note [DTensor's random numbers on openreg]
A random operator on a sharded DTensor (a parameter's initialization once FSDP2 or tensor
parallelism has sharded it: `reset_parameters()` after `to_empty`) runs inside DTensor's
`OffsetBasedRNGTracker`, which reads the device generator's state as Philox's, an 8-byte seed and
an 8-byte offset (`_PhiloxState` in torch/distributed/tensor/_random.py), and moves the offset
per shard, so that the shards draw what one device would draw for the whole tensor. It takes any
mesh whose device module has `set_rng_state` for such a device (`is_rng_supported_mesh`).
openreg's generator is the CPU's Mersenne Twister, so that a seed draws the CPU's numbers
(docs/generator.md): its state is 5,056 bytes, and the tracker raised AssertionError on the first
random operator. A Mersenne Twister has no offset to move, so no tracker can make shards draw
the whole tensor's numbers. The CPU's mesh gets no tracker (`torch.cpu` has no `set_rng_state`):
each rank draws from its own generator, with DTensor's warning. openreg meshes get the same
answer from `is_rng_supported_mesh`, so DTensor's random operators on openreg give, rank by rank,
the CPU's numbers, as the rest of openreg does. torch 2.13 to 2.15 offer no registration point
for a device's answer; `_dispatch.py` imports the function by name, so both names are replaced.

tests/distributed_checks.py#check_dtensor_random_operators_draw_the_cpus_numbers checks FSDP2's
initialization after sharding against the CPU mesh's on 2 ranks, bitwise, and
tests/test_distributed.py#test_dtensors_offset_tracker_still_refuses_openregs_generator pins the
reason: when DTensor's tracker takes openreg's generator, that test fails and this patch should go.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from ._C import DEVICE_NAME

_original: Any = None


def _is_rng_supported_mesh(device_mesh: Any) -> bool:
    if device_mesh.device_type == DEVICE_NAME:
        warnings.warn(
            f"DTensor random operators on an {DEVICE_NAME} mesh draw from each rank's own generator, "
            f"as on a CPU mesh: {DEVICE_NAME}'s generator is the CPU's Mersenne Twister, which has no "
            "Philox offset for DTensor to move per shard (Note [DTensor's random numbers on openreg])",
            stacklevel=2,
        )
        return False
    return _original(device_mesh)


def apply() -> None:
    """Called when torch.distributed.tensor._random has loaded."""
    global _original
    from torch.distributed.tensor import _random

    if _random.is_rng_supported_mesh is _is_rng_supported_mesh:
        return
    _original = _random.is_rng_supported_mesh
    _random.is_rng_supported_mesh = _is_rng_supported_mesh
    dispatch = sys.modules.get("torch.distributed.tensor._dispatch")
    if dispatch is not None:  # loaded (or loading: its import then binds the replacement)
        dispatch.is_rng_supported_mesh = _is_rng_supported_mesh  # type: ignore[attr-defined]


def original_is_rng_supported_mesh() -> Any:
    """The function this module replaced, for the test that pins the reason for the patch."""
    return _original
