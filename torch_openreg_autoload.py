"""The `torch.backends` entry point of torch_openreg (see pyproject.toml).

`import torch` calls `load()` at its end. It lives outside the package on purpose: if the package
cannot be imported (a torch it was not built for, a missing library), `import torch` must still
work, with a warning that says why, rather than fail. A module inside the package could not catch
that, because importing it runs the package's own `__init__` first.
"""

import warnings


def load() -> None:
    try:
        import torch_openreg  # noqa: F401  (registers the openreg device)
    except Exception as error:  # noqa: BLE001  anything: import torch must survive it
        warnings.warn(
            f"torch_openreg could not be loaded, so the 'openreg' device is not available: {error} "
            "(`import torch_openreg` shows the whole error; TORCH_DEVICE_BACKEND_AUTOLOAD=0 skips "
            "loading it)",
            RuntimeWarning,
            stacklevel=2,
        )
