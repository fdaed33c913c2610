"""A process that used openreg exits with status 0: Note [Autograd device threads at exit] in
torch_openreg/_autograd_exit.py. Before, 4 of 16 processes that ran a backward on openreg and
exited aborted ("terminate called without an active exception", status 134)."""

import subprocess
import sys

BACKWARD_THEN_EXIT = (
    "import torch\n"
    "x = torch.randn(3, device='openreg', requires_grad=True)\n"
    "x.sum().backward()\n"
)


def test_processes_that_ran_backward_exit_cleanly():
    runs, parallel = 40, 2
    outcomes = []
    for start in range(0, runs, parallel):
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", BACKWARD_THEN_EXIT],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(min(parallel, runs - start))
        ]
        for proc in procs:
            _, err = proc.communicate(timeout=120)
            outcomes.append((proc.returncode, err.strip()[-200:]))
    failed = [o for o in outcomes if o[0] != 0]
    assert failed == [], f"{len(failed)} of {runs} processes failed at exit: {failed[:3]}"
