"""Settles the autograd engine's openreg device threads before the interpreter finalizes.

Note [Autograd device threads at exit]
PyTorch's autograd engine runs the backward nodes of a non-CPU device on a thread of its own per
device index (`pt_autograd_0`, ...), started at the first backward and never joined. Since torch
2.13 `torch.autograd.graph._engine_run_backward` stashes a Python object (the caller's
`contextvars` context) in the thread-local state every GraphTask copies. The owner thread wakes as
soon as a device thread marks the GraphTask complete, and the device thread drops its reference to
the GraphTask a moment later. When the program's last line was that backward, the main thread can
reach interpreter finalization first: the device thread then holds the last reference, and
releasing the stashed object needs the GIL. During finalization taking the GIL ends the thread
with `pthread_exit`, whose forced unwind crosses a `noexcept` destructor: `std::terminate`,
"terminate called without an active exception", exit status 134. On openreg 4 processes of 16
that ran `x.sum().backward()` and exited died this way on a loaded 2-core machine (upstream:
pytorch/pytorch#180701 clears that reference in the engine; torch 2.13.0 does not).

Nothing in torch waits for those threads, so openreg does, from an `atexit` handler (which runs
while the interpreter is whole, before finalization): one tiny backward per device through the
engine's own entry point, without a stashed object. A device thread takes tasks in order, so once
it has run this backward's node it has finished the previous iteration of its loop and released
whatever GraphTask it held, with the GIL available. The cost is a few hundred microseconds per
device at exit, and only in a process that initialized openreg.
"""

import atexit

import torch

from ._C import DEVICE_NAME


def _settle_autograd_device_threads() -> None:
    if not torch.openreg.is_initialized():
        return
    engine = torch.autograd.Variable._execution_engine
    try:
        with torch.enable_grad():
            for index in range(torch.openreg.device_count()):
                leaf = torch.zeros((), device=torch.device(DEVICE_NAME, index), requires_grad=True)
                out = leaf * 1.0
                # The engine's own entry point: _engine_run_backward would stash an object again.
                engine.run_backward((out,), (torch.ones_like(out),), False, False, (), True, True)
    except Exception:  # noqa: BLE001 - at exit, a device already broken is not worth a traceback
        pass


atexit.register(_settle_autograd_device_threads)
