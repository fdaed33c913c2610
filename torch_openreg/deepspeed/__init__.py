"""DeepSpeed on openreg: `OpenRegAccelerator`, DeepSpeed's accelerator interface for openreg devices.

    import deepspeed
    from deepspeed.accelerator import set_accelerator
    from torch_openreg.deepspeed import OpenRegAccelerator

    set_accelerator(OpenRegAccelerator())

DeepSpeed picks its accelerator from a list of names it knows; an out-of-tree device is set with
`set_accelerator` before `deepspeed.init_distributed` and `deepspeed.initialize` (docs/ecosystem.md).
Needs the `deepspeed` package; importing this module without it raises ImportError.
"""

from .accelerator import OpenRegAccelerator

__all__ = ["OpenRegAccelerator"]
