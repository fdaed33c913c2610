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


# [marker: vllm-entry-point]
def vllm_platform() -> str | None:
    """The `vllm.platform_plugins` entry point: the qualified name of openreg's vLLM platform, or
    None when it cannot run (the package does not import against this torch, or no device), so that
    vLLM goes on to pick another platform. Here, outside the package, for the same reason as `load`:
    vLLM logs an import failure of the entry point's own module as a broken plugin."""
    try:
        import torch

        import torch_openreg  # noqa: F401  (registers the openreg device)

        if torch.openreg.device_count() == 0:
            return None
    except Exception:  # noqa: BLE001  anything: vLLM must be able to fall back to another platform
        return None
    return "torch_openreg.vllm.platform.OpenRegPlatform"
