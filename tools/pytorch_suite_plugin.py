"""pytest plugin for tools/pytorch_suite.py: runs one of PyTorch's device-generic test files.

Loaded with `-p pytorch_suite_plugin` (tools/ on PYTHONPATH) in a fresh process per file and
device. It does three things before the test file is imported:
- bridges test-helper names that PyTorch renamed since the copy of the file was written
  (`BRIDGES`), so an older file imports on the installed torch without being edited;
- on openreg (`OPENREG_SUITE_DEVICE=openreg`), configures `PrivateUse1TestBase` through PyTorch's
  own hooks: `bypass_device_restrictions`, so accelerator-only tests (`@onlyCUDA`) run too, and
  the expected failures of `pytorch_suite_expected.py` as `unittest.expectedFailure`, so a fix
  shows up as an unexpected success;
- streams one JSON line per test to `OPENREG_SUITE_EVENTS`: "start" before it runs (so the parent
  can name the test a crash or a hang killed), then its outcome, duration and first error line.
"""

from __future__ import annotations

import functools
import json
import os
import pathlib
import re
import time
import unittest
import warnings

import pytest

_EVENTS = None
_DEFAULT_TYPE = pytest.StashKey[str]()


def _emit(event: dict) -> None:
    _EVENTS.write(json.dumps(event) + "\n")
    _EVENTS.flush()


# Names an older test file imports that the installed torch spells differently, read from both
# releases' torch/testing/_internal: module -> {old name: how to make it from the module}.
def _tf32_is_not_fp32(_module):
    # The older helper: True only on a CUDA device of compute capability 8.0 or later.
    import torch

    def tf32_is_not_fp32():
        return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 8

    return tf32_is_not_fp32


BRIDGES = {
    "torch.testing._internal.common_utils": {"skipIfMps": lambda m: m.skipIfMPS},
    "torch.testing._internal.common_device_type": {
        "onlyOnCPUAndCUDA": lambda m: m.onlyNativeDeviceTypes,
    },
    "torch.testing._internal.common_cuda": {"tf32_is_not_fp32": _tf32_is_not_fp32},
    # test_nn.py's module tests: a list then, a function that makes it now.
    "torch.testing._internal.common_nn": {"new_module_tests": lambda m: m.get_new_module_tests()},
}


def _bridge() -> None:
    import importlib

    for module_name, names in BRIDGES.items():
        module = importlib.import_module(module_name)
        for old, make in names.items():
            if not hasattr(module, old):
                setattr(module, old, make(module))


def _generic_name(test_name: str, device_type: str) -> str:
    """`test_foo_openreg_float32` -> `test_foo`: the key of pytorch_suite_expected.EXPECTED."""
    return re.split(rf"_{device_type}(_|$)", test_name, maxsplit=1)[0]


def _expected_lists():
    """tools/pytorch_suite_expected.py, or the file OPENREG_SUITE_EXPECTED names (the runner's own
    tests use one of theirs)."""
    import importlib.util

    path = os.environ.get("OPENREG_SUITE_EXPECTED") or str(
        pathlib.Path(__file__).with_name("pytorch_suite_expected.py"))
    spec = importlib.util.spec_from_file_location("pytorch_suite_expected", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _only_cpu(fn):
    """@onlyCPU, deaf to bypass_device_restrictions."""
    @functools.wraps(fn)
    def only_fn(self, *args, **kwargs):
        if self.device_type != "cpu":
            raise unittest.SkipTest("Only runs on cpu")
        return fn(self, *args, **kwargs)

    return only_fn


def _configure_openreg() -> None:
    from torch.testing._internal import common_device_type
    from torch.testing._internal.common_device_type import PrivateUse1TestBase

    expected = _expected_lists()

    # Accelerator-only tests (@onlyCUDA and the like) run on openreg; @onlyCPU tests, which check
    # the CPU's own behaviour (numpy views of a tensor, CPU-only kernels), stay on the CPU.
    PrivateUse1TestBase.bypass_device_restrictions = True
    common_device_type.onlyCPU = _only_cpu
    # @largeTensorTest asks how much memory the device has free, and knows no PrivateUse1 device
    # ("Unknown device type"): openreg answers as CUDA does, after collecting garbage and emptying
    # the cache (an earlier large test's cached memory is not in use), from mem_get_info times the
    # process's memory fraction.
    has_sufficient_memory = common_device_type._has_sufficient_memory

    def openreg_has_sufficient_memory(device, size):
        import gc

        import torch

        device = torch.device(device)
        if device.type != torch._C._get_privateuse1_backend_name():
            return has_sufficient_memory(device, size)
        gc.collect()
        torch.openreg.empty_cache()
        free = torch.openreg.mem_get_info(device)[0]
        return free * torch.openreg.get_per_process_memory_fraction(device) >= size

    common_device_type._has_sufficient_memory = openreg_has_sufficient_memory
    PrivateUse1TestBase.test_exclusions = {
        cls: set(tests) for cls, tests in expected.EXCLUDED.items()
    }
    instantiate = PrivateUse1TestBase.instantiate_test.__func__

    @classmethod
    def instantiate_test(cls, name, test, *, generic_cls=None):
        before = set(cls.__dict__)
        instantiate(cls, name, test, generic_cls=generic_cls)
        reasons = expected.EXPECTED.get(generic_cls.__name__, {})
        for new in set(cls.__dict__) - before:
            if new.startswith("test") and _expected_reason(reasons, new, cls.device_type):
                setattr(cls, new, unittest.expectedFailure(getattr(cls, new)))

    PrivateUse1TestBase.instantiate_test = instantiate_test


def _expected_reason(reasons: dict, test_name: str, device_type: str) -> str | None:
    """The reason for an instantiated test: an entry names the generic test (every variant) or one
    variant exactly (`test_foo_openreg_float16`)."""
    if test_name in reasons:
        return reasons[test_name]
    return reasons.get(_generic_name(test_name, device_type))


def pytest_configure(config) -> None:
    global _EVENTS
    _EVENTS = open(os.environ["OPENREG_SUITE_EVENTS"], "a", encoding="utf-8")  # noqa: SIM115 (open until exit)
    _bridge()
    if os.environ.get("OPENREG_SUITE_DEVICE") == "openreg":
        _configure_openreg()


def pytest_collection_modifyitems(config, items) -> None:
    """Leaves out the tests an earlier process of this run already finished or died in."""
    skip_file = os.environ.get("OPENREG_SUITE_SKIP")
    done = set(pathlib.Path(skip_file).read_text(encoding="utf-8").split("\n")) if skip_file else set()
    if done:
        kept = [item for item in items if item.nodeid not in done]
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = kept


def _synchronize_devices() -> None:
    import torch

    for index in range(torch.openreg.device_count()):
        torch.openreg.synchronize(index)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """On openreg, each test ends with every device synchronized: a kernel failure the test left
    queued is reported as this test's failure, not raised in whichever test synchronizes next."""
    if os.environ.get("OPENREG_SUITE_DEVICE") != "openreg":
        return (yield)
    try:
        result = yield
    except BaseException:
        try:  # the test failed already; a failure it left queued goes with it
            _synchronize_devices()
        except RuntimeError:  # reported once, here, and dropped
            pass
        raise
    _synchronize_devices()
    return result


def _default_tensor_type() -> str | None:
    import torch

    try:
        return torch.tensor([]).type()  # "torch.FloatTensor": the default dtype and device type
    except RuntimeError:  # a default type of a device that cannot make tensors (torch.cuda without a GPU)
        return None


def pytest_runtest_setup(item) -> None:
    item.stash[_DEFAULT_TYPE] = _default_tensor_type()


def pytest_runtest_teardown(item, nextitem) -> None:
    """Each test ends with the default tensor type it began with. An accelerator-only test run on
    openreg may set torch.cuda's type as the default (`torch.set_default_tensor_type(
    torch.cuda.DoubleTensor)`, test_tensor_creation_ops.py) and, with a CUDA build of torch and no
    GPU, fail at its first tensor, before setting the type back: every later test that makes a
    tensor without naming a device would then fail for it (found on torch 2.15.0+cu132)."""
    saved = item.stash.get(_DEFAULT_TYPE, None)
    if saved is not None and _default_tensor_type() != saved:
        import torch

        with warnings.catch_warnings():  # set_default_tensor_type is deprecated
            warnings.simplefilter("ignore")
            torch.set_default_tensor_type(saved)


def pytest_runtest_logstart(nodeid, location) -> None:
    _emit({"event": "start", "test": nodeid, "time": time.time()})


def _first_line(report) -> str:
    crash = getattr(report.longrepr, "reprcrash", None)
    if crash is not None:
        return crash.message.strip().splitlines()[0][:300] if crash.message.strip() else ""
    if isinstance(report.longrepr, tuple):  # a skip: (file, line, reason)
        return str(report.longrepr[2])[:300]
    return str(report.longrepr).strip().splitlines()[-1][:300] if report.longrepr else ""


def pytest_runtest_logreport(report) -> None:
    # One outcome per test: a setup failure or skip, else the call's outcome.
    if report.when == "setup" and report.outcome == "passed":
        return
    if report.when == "teardown" and report.outcome == "passed":
        return
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.skipped else "xpassed"
    elif report.when == "teardown":
        outcome = "teardown-error"
    else:
        outcome = report.outcome  # passed, failed, skipped
    if outcome == "failed" and "Unexpected success" in str(report.longrepr):
        outcome = "xpassed"
    _emit({"event": "end", "test": report.nodeid, "outcome": outcome,
           "seconds": round(report.duration, 4), "message": _first_line(report)
           if outcome != "passed" else ""})
