"""torchtitan's trainer as `make test-torchtitan` launches it (docs/torchtitan.md):

    torchrun ... tests/libraries/torchtitan_launch.py openreg|cpu --module ... --config ... [flags]

is `torchrun ... -m torchtitan.train --module ... [flags]` on openreg, which torchtitan finds
itself, or on the CPU, the oracle (Note [torchtitan on the CPU]); with torch.distributed.set_timeout
added on torch releases before 2.14 (Note [set_timeout before torch 2.14]). Each rank also logs one
line once torchtitan has made its process group: the backends, the device index, where Gloo connects.
"""

import sys
from types import SimpleNamespace

import torch
import torch._utils
import torch.distributed as dist

# Note [set_timeout before torch 2.14]
# torchtitan 0.3.0 shortens every group's timeout after the first step with
# `torch.distributed.set_timeout(timeout, group)` (`set_pg_timeouts`, torchtitan/distributed/utils.py),
# a function torch 2.14 added (2.14.1 and 2.15.0 have it); torch 2.13.0 has the method it calls,
# `ProcessGroup.set_timeout`, but not the function, and the trainer stops with AttributeError after
# step 1. Before 2.14 this adds the function with 2.15's body (torch/distributed/distributed_c10d.py,
# `set_timeout`: the default group when none is given, then `group.set_timeout(timeout)`), on both
# devices. `tests/test_torchtitan_support.py` checks that the releases before 2.14 still lack it and
# the later ones have it; from 2.14 this adds nothing, and it can go once the oldest supported torch
# is 2.14.


def _add_set_timeout() -> None:
    if hasattr(dist, "set_timeout"):
        return

    def set_timeout(timeout, group=None):
        (group if group is not None else dist.distributed_c10d._get_default_group()).set_timeout(timeout)

    dist.set_timeout = set_timeout


# Note [torchtitan on the CPU]
# torchtitan 0.3.0 takes its device from `torch._utils._get_available_device_type()` (cuda, mps,
# xpu, mtia, then the PrivateUse1 backend if available) and falls back to "cuda"; it has no CPU
# device (`torchtitan/tools/utils.py`, `get_device_info`). The oracle runs it on the CPU by answering
# "cpu" there before torchtitan is imported, with the calls torchtitan makes on its device module
# that `torch.cpu` lacks added to it, and `current_device` giving an index as other device modules
# do (torchtitan's `set_pg_timeouts` passes it to `barrier(device_ids=...)`): the memory monitor's
# (`torchtitan/components/metrics.py`, `DeviceMemoryMonitor`), which read zeros for the CPU. The
# process group is then "cpu:gloo" (torchtitan asks `Backend.default_device_backend_map` for the
# device's backend, `_get_distributed_backend` in torchtitan/distributed/utils.py). torch_openreg
# must not be loaded (TORCH_DEVICE_BACKEND_AUTOLOAD=0, set by the suite), so that nothing of openreg
# is in the oracle. The openreg run has none of this: torchtitan finds openreg itself, and its
# group is served by occl, the default backend of openreg (docs/distributed.md).

_ZERO_STATS = {"active_bytes.all.peak": 0, "reserved_bytes.all.peak": 0, "num_alloc_retries": 0, "num_ooms": 0}


def _use_the_cpu() -> None:
    if "torch_openreg" in sys.modules:
        raise RuntimeError("the CPU oracle runs without torch_openreg: set TORCH_DEVICE_BACKEND_AUTOLOAD=0")
    torch._utils._get_available_device_type = lambda: "cpu"
    cpu = torch.cpu
    cpu.current_device = lambda: 0
    cpu.get_device_name = lambda device=None: "cpu"
    cpu.get_device_properties = lambda device=None: SimpleNamespace(name="cpu", total_memory=1 << 40)
    cpu.reset_peak_memory_stats = lambda device=None: None
    cpu.empty_cache = lambda: None
    cpu.memory_stats = lambda device=None: dict(_ZERO_STATS)


def _log_the_group() -> None:
    """One line per rank once torchtitan has made its process group: which backend serves which
    device, and where Gloo's TCP transport listens (the two-host run's log shows it)."""
    import os

    init = dist.init_process_group

    def init_process_group(*args, **kwargs):
        init(*args, **kwargs)
        print(f"[torchtitan_launch] rank {dist.get_rank()} of {dist.get_world_size()}: "
              f"backends {dist.get_backend_config()}, device index {os.environ.get('LOCAL_RANK')}, "
              f"MASTER_ADDR {os.environ.get('MASTER_ADDR')}, GLOO_SOCKET_IFNAME {os.environ.get('GLOO_SOCKET_IFNAME')}",
              flush=True)

    dist.init_process_group = init_process_group


def main() -> None:
    device = sys.argv.pop(1)
    if device == "cpu":
        _use_the_cpu()
    elif device != "openreg" or "torch_openreg" not in sys.modules:
        raise SystemExit(f"{sys.argv[0]}: the first argument is openreg (autoloaded) or cpu, not {device!r}")
    _add_set_timeout()
    _log_the_group()
    from torchtitan.tools.utils import device_type
    if device_type != device:
        raise SystemExit(f"torchtitan picked {device_type!r}, not {device!r}")
    from torchtitan.train import main as train_main

    train_main()


if __name__ == "__main__":
    main()
