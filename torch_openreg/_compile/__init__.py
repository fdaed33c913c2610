"""torch.compile for openreg: the Dynamo device interface, Inductor's registration for the device,
and the Dynamo backend named "openreg". See docs/compile.md.

# [marker: compile-registration]
Note [Registration when Dynamo and Inductor load]
Each registration goes into a registry of a module of torch._dynamo or torch._inductor, and
importing those modules costs almost as much again as importing torch (docs/compile.md). Most
processes that load torch_openreg never compile, so torch_openreg's import (`install()`) registers each
part the moment the module holding its registry finishes loading:
  torch._dynamo                       the device interface and the "openreg" backend
  torch._subclasses.fake_impls        the patch of Note [Fake convolutions answer in the CPU's
                                      layout] (`import torch` loads it: applied at once)
  torch.distributed.tensor._random    the patch of Note [DTensor's random numbers on openreg]
                                      (torch_openreg/_dtensor_random.py; not a compile part, but
                                      the same hook: DTensor loads as late as Dynamo)
  torch._inductor.codegen.common      the device op overrides (read before any wrapper is made)
  torch._inductor.codegen.cpp         the scheduling and the wrapper (Inductor's
                                      init_backend_registration imports it before lowering)
  torch._inductor.scheduler           the patch of Note [Inductor's CPU-only guards]
A module already loaded gets its part at once. The hook is an import finder (sys.meta_path) that
wraps the module's own loader, so the module loads as it would and the registration runs after;
it patches nothing of torch. A program whose first import is one of this package's modules that
import Dynamo or Inductor at their top (`from torch_openreg._compile.device_interface import ...`)
loads torch._dynamo from inside that module, before the module has its classes: the hooks wait
while one of ours is mid-import, and `ready()` on each such module's last line runs them.

From torch 2.15 on, Inductor asks the device module itself: init_backend_registration(), which
runs before every compilation's lowering, calls `torch.openreg._inductor_backend_init()` until the
device has a scheduling. That hook registers Inductor's three parts (register_inductor below), so
on 2.15 the import finder waits for torch._dynamo alone (a version gate, Note [Version gates]).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from .._C import DEVICE_NAME
from .._compat import torch_before


def _register_dynamo() -> None:
    from torch._dynamo.backends.registry import _COMPILER_FNS, register_backend
    from torch._dynamo.device_interface import register_interface_for_device

    from . import backend
    from .device_interface import OpenRegInterface

    register_interface_for_device(DEVICE_NAME, OpenRegInterface)
    for index in range(OpenRegInterface.device_count()):
        register_interface_for_device(f"{DEVICE_NAME}:{index}", OpenRegInterface)
    if DEVICE_NAME not in _COMPILER_FNS:
        register_backend(backend.openreg, name=DEVICE_NAME)


def _register_device_op_overrides() -> None:
    from . import device_op_overrides

    device_op_overrides.register()


def _register_inductor_backend() -> None:
    from . import inductor

    inductor.register()


def _apply_patches() -> None:
    from . import patches

    patches.apply()


def _wrap_fake_convolution() -> None:
    from . import fake_convolution

    fake_convolution.apply()


def _dtensor_random_numbers() -> None:
    from .. import _dtensor_random

    _dtensor_random.apply()


def register_inductor() -> None:
    """Inductor's parts at once: `torch.openreg._inductor_backend_init`, which torch >= 2.15's
    Inductor calls before lowering a graph for openreg."""
    _register_device_op_overrides()
    _register_inductor_backend()
    _apply_patches()


_HOOKS: dict[str, Callable[[], None]] = {
    "torch._dynamo": _register_dynamo,
    "torch._subclasses.fake_impls": _wrap_fake_convolution,  # Note [Fake convolutions answer in the CPU's layout]
    "torch.distributed.tensor._random": _dtensor_random_numbers,  # Note [DTensor's random numbers on openreg]
}
if torch_before(2, 15):  # needed while torch < 2.15: Inductor does not call _inductor_backend_init
    _HOOKS |= {
        "torch._inductor.codegen.common": _register_device_op_overrides,
        "torch._inductor.codegen.cpp": _register_inductor_backend,
        "torch._inductor.scheduler": _apply_patches,
    }
_pending: dict[str, Callable[[], None]] = {}
_lock = threading.Lock()


def _initializing(name: str) -> bool:
    spec = getattr(sys.modules.get(name), "__spec__", None)
    return bool(getattr(spec, "_initializing", False))


def _loaded(name: str) -> bool:
    return name in sys.modules and not _initializing(name)


def _ours_initializing(besides: str = "") -> bool:
    return any(_initializing(n) for n in list(sys.modules) if n.startswith(__name__ + ".") and n != besides)


_deferred: list[Callable[[], None]] = []


def _unless_ours_are_loading(callback: Callable[[], None]) -> Callable[[], None]:
    """A registration hook that waits while a module of this package is mid-import. A program whose
    first import is one of them (`from torch_openreg._compile.device_interface import ...`) makes
    that module import torch._dynamo or Inductor, whose hook then needs the module before it has
    its classes; `ready()` on the module's last line runs the hook instead."""

    def run() -> None:
        if _ours_initializing():
            _deferred.append(callback)
        else:
            callback()

    return run


def ready(module: str) -> None:
    """The last line of each module here that imports torch._dynamo or torch._inductor at its top:
    runs the registrations its import put off, once no other module here is mid-import."""
    if not _ours_initializing(besides=module):
        while _deferred:
            _deferred.pop(0)()


class _ThenRegister(importlib.abc.Loader):
    """The module's own loader, then the registration."""

    def __init__(self, loader: Any, callback: Callable[[], None]) -> None:
        self._loader = loader
        self._callback = callback

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._callback()

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename, ...: the module's loader
        return getattr(self._loader, name)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        with _lock:
            callback = _pending.pop(name, None)
        if callback is None:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _ThenRegister(spec.loader, callback)
                return spec
        return None


_finder = _Finder()


def install() -> None:
    """Registers each part now if its module is loaded, else when it loads. Called once, by
    torch_openreg's import."""
    for name, callback in _HOOKS.items():
        if _loaded(name):
            callback()
        else:
            with _lock:
                _pending[name] = _unless_ours_are_loading(callback)
    if _pending and _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
