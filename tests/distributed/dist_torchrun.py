"""Real launches of examples/train_ddp.py with torchrun on the loopback interface: 2 processes on
one node, and two single-process "nodes" meeting through c10d rendezvous. The example exits 1
unless DDP on openreg ends bitwise equal to DDP on the CPU with Gloo on every rank."""

import os
import subprocess
import sys
from pathlib import Path

from distributed_harness import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def env():
    return {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}


def test_torchrun_two_processes_on_one_node():
    port = free_port()
    cmd = [*TORCHRUN, "--nproc-per-node", "2", "--master-addr", "127.0.0.1", "--master-port", str(port)]
    result = subprocess.run(
        [*cmd, str(EXAMPLE), "--steps", "20"], env=env(), capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "world size 2" in result.stdout
    assert "parameters bitwise equal to CPU DDP on every rank: True" in result.stdout
    assert "losses bitwise equal to CPU DDP: True" in result.stdout


def test_torchrun_two_nodes_with_c10d_rendezvous():
    endpoint = f"127.0.0.1:{free_port()}"
    cmd = [*TORCHRUN, "--nnodes", "2", "--nproc-per-node", "1", "--rdzv-backend", "c10d"]
    cmd += ["--rdzv-endpoint", endpoint, "--rdzv-id", "openreg-test", str(EXAMPLE), "--steps", "10"]
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    nodes = [subprocess.Popen(cmd, env=env(), **pipes) for _ in range(2)]
    outputs = []
    try:
        for node in nodes:
            out, err = node.communicate(timeout=300)
            outputs.append(out)
            assert node.returncode == 0, out + err
    finally:
        for node in nodes:
            node.kill()
    combined = "".join(outputs)
    assert "world size 2" in combined, combined
    assert "parameters bitwise equal to CPU DDP on every rank: True" in combined
