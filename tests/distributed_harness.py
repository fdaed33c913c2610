"""Runs checks in 2 spawned ranks on the loopback interface (127.0.0.1), rank r on openreg:r.

`run_ranks(module, names, ...)` spawns the ranks once; each rank joins one process group and runs
the named functions of `module` in order, each as `fn(rank, world_size)`, and records "ok" or the
failure's traceback per name. The parent returns {name: [result of rank 0, result of rank 1]}, so
one pytest test per check can assert its own outcome while the ranks are started only once. A run
that outlives `timeout` is killed and reported as such: a test never hangs.
"""

import datetime
import gc
import json
import os
import socket
import sys
import time
import traceback

import torch
import torch.multiprocessing as mp


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def loopback_env(port: int, world_size: int, rank: int | None = None) -> dict:
    env = {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world_size),
        "GLOO_SOCKET_IFNAME": "lo",
    }
    if rank is not None:
        env.update(RANK=str(rank), LOCAL_RANK=str(rank))
    return env


def _rank_main(rank, module_name, names, world_size, port, backend, result_dir, sys_path, group_timeout, env, hard_exit):  # noqa: E501
    sys.path[:0] = [p for p in sys_path if p not in sys.path]
    os.environ.update(loopback_env(port, world_size, rank))
    os.environ["OPENREG_TEST_SHARED_DIR"] = result_dir  # the same directory for every rank
    os.environ.update(env or {})
    import torch.distributed as dist

    dist.set_debug_level_from_env()  # read at import, before `env` was set
    import faulthandler
    import importlib

    faulthandler.enable()

    import torch.distributed as dist

    torch.openreg.set_device(rank)
    module = importlib.import_module(module_name)
    results = {}
    try:
        if backend is not None:
            dist.init_process_group(
                backend=backend or None,
                rank=rank,
                world_size=world_size,
                device_id=torch.device("openreg", rank),
                timeout=datetime.timedelta(seconds=group_timeout) if group_timeout else None,
            )
        for name in names:
            try:
                getattr(module, name)(rank, world_size)
                results[name] = "ok"
            except BaseException:  # noqa: BLE001  (recorded for the parent, which asserts)
                results[name] = traceback.format_exc()
            with open(os.path.join(result_dir, f"rank{rank}.json"), "w") as f:
                json.dump(results, f)
    finally:
        if hard_exit:
            os._exit(0)  # after a fault the group cannot be destroyed cleanly
        if backend is not None and dist.is_initialized():
            gc.collect()  # before the group goes: docs/distributed.md, "Exit"
            dist.destroy_process_group()


def run_ranks(
    module_name,
    names,
    result_dir,
    *,
    world_size=2,
    backend="",
    timeout=240.0,
    group_timeout=None,
    env=None,
    hard_exit=False,
) -> dict:
    """backend "" is init_process_group() with no backend; None: the checks make their own group.
    group_timeout: the group's timeout in seconds (PyTorch's default if None). env: set in the
    ranks before the group is made. hard_exit: the ranks end with os._exit after the checks."""
    port = free_port()
    extra = (group_timeout, env, hard_exit)
    context = mp.start_processes(
        _rank_main,
        args=(module_name, list(names), world_size, port, backend, str(result_dir), list(sys.path), *extra),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    # Polled rather than context.join(), which kills the other ranks as soon as one fails: a
    # fault check lets a rank die on purpose and watches what the others do.
    deadline = time.monotonic() + timeout
    error = None
    while any(p.is_alive() for p in context.processes):
        if time.monotonic() > deadline:
            error = f"timed out after {timeout} s"
            break
        time.sleep(0.2)
    for p in context.processes:
        if p.is_alive():
            p.kill()
        p.join()
    if error is None:
        codes = [p.exitcode for p in context.processes]
        if any(codes):
            error = f"exit codes {codes}"
    per_rank = []
    for rank in range(world_size):
        path = os.path.join(result_dir, f"rank{rank}.json")
        if os.path.exists(path):
            with open(path) as f:
                per_rank.append(json.load(f))
        else:
            per_rank.append({})
    return {name: [r.get(name, f"not run ({error})") for r in per_rank] for name in names}
