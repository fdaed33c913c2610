"""What differs between the torch releases torch_openreg builds for, in one place (docs/versions.md).

Note [Version gates]
One source tree builds for every supported minor release of torch, each build against the torch it
will run with (the C++ ABI differs between minors). Where the releases differ, the code asks
`torch_before(X, Y)`: true on the releases where the gate's branch is needed. Every gate reads
"needed while torch < X.Y", so that when the oldest supported release reaches X.Y the branch is
dead and goes, with the gate. C++ has the same in csrc/compat/TorchVersion.h
(OPENREG_TORCH_BEFORE). tests/test_versions.py lists every gate of both languages and fails if one
names a release outside (OLDEST, NEWEST]: such a gate is always true or always false.
"""

import torch

# The supported window of minor releases, oldest and newest (docs/versions.md, the support matrix).
OLDEST = (2, 13)
NEWEST = (2, 15)


def minor_release(version: str) -> tuple[int, int]:
    """(major, minor) of a torch version string ("2.14.1+cu130" is (2, 14)): the one place the
    release is worked out (the package's import check, setup.py's pin, the speed guard's budget)."""
    major, minor = version.split("+")[0].split(".")[:2]
    return int(major), int(minor)


RUNNING = minor_release(str(torch.__version__))


def torch_before(major: int, minor: int) -> bool:
    """True while the running torch is older than major.minor: the gate's branch is for those."""
    return (major, minor) > RUNNING
