"""torch_openreg: the `openreg` PyTorch backend.

Importing this package registers the device with PyTorch: PrivateUse1 is renamed `openreg`,
`torch.openreg` becomes the device module, and `.openreg()` / `.is_openreg` methods are generated
for tensors, modules and storages. With the package installed, `import torch` alone does this (the
`torch.backends` entry point, torch_openreg_autoload.load, imports this package).
"""

import torch

from . import _build_info, _compat

# Note [Build and runtime torch must match]
# The extension is compiled against one torch minor release's C++ headers and ABI; loading it into
# another minor release fails with undefined symbols or, worse, runs with mismatched layouts (the
# interfaces it implements gain virtuals between minors). So the build's minor release (X.Y) must be
# the running one's. The patch release and the local label are free: patch releases are
# cherry-picks that keep the minor's C++ ABI (a build against 2.14.1 runs on 2.14.0), and the
# builds of one release for different accelerators (2.13.0+cpu, 2.13.0 from PyPI, a CUDA build)
# share libtorch_cpu's headers and ABI, which is all this extension links. The wheel requires the
# same range (Note [The wheel's tag and torch pin] in setup.py).
if (
    _compat.minor_release(_build_info.TORCH_VERSION) != _compat.RUNNING
    or bool(torch._C._GLIBCXX_USE_CXX11_ABI) != _build_info.CXX11_ABI
):
    raise ImportError(
        f"torch_openreg was built against torch {_build_info.TORCH_VERSION} "
        f"(C++11 ABI {_build_info.CXX11_ABI}), so it needs torch "
        f"{'.'.join(map(str, _compat.minor_release(_build_info.TORCH_VERSION)))}.x, "
        f"but torch {torch.__version__} (C++11 ABI {bool(torch._C._GLIBCXX_USE_CXX11_ABI)}) is running. "
        "Rebuild torch_openreg against the installed torch: "
        "pip install --no-build-isolation --force-reinstall <path to the openreg source tree> "
        "(docs/versions.md lists the supported releases)."
    )

# _C loads libtorch_openreg, whose guard and hooks register themselves.
from . import _C, openreg  # noqa: F401
from ._C import DEVICE_NAME


# [marker: backend-registration]
def _register() -> None:
    """Registers `openreg` with torch. Safe to call more than once (import and autoload)."""
    if torch._C._get_privateuse1_backend_name() != DEVICE_NAME:
        torch.utils.rename_privateuse1_backend(DEVICE_NAME)
    if getattr(torch, DEVICE_NAME, None) is not openreg:
        torch._register_device_module(DEVICE_NAME, openreg)
    if not hasattr(torch.Tensor, "is_" + DEVICE_NAME):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=True)


_register()
openreg.debug._enable_from_environment()  # OPENREG_DEBUG_*, OPENREG_STREAM_SANITIZER, OPENREG_FAULT_INJECTION

# torch.compile: Dynamo's device interface, Inductor for the device, the "openreg" backend.
from . import _compile  # noqa: E402

_compile.install()

# The occl collective backend registers itself on import; Note [Autograd device threads at exit]:
# _autograd_exit registers an atexit handler.
from . import _autograd_exit, distributed  # noqa: E402,F401

__all__ = ["openreg"]
