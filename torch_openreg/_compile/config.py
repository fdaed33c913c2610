"""openreg's device config for Inductor (`register_backend_for_device(device_custom_config=...)`).

Inductor puts each device's config in the key of its FX graph cache. The generated code of an
openreg graph depends on this package's codegen (the launcher lines, the trampoline, the
allocations), which Inductor's own key does not see; `codegen_version` is a digest of that
code, so a changed torch_openreg never loads a graph that an older one generated.
"""

import hashlib
import pathlib
import sys

from torch.utils._config_module import install_config_module

# [marker: codegen-version]
codegen_version: str = hashlib.sha256(
    b"".join(path.read_bytes() for path in sorted(pathlib.Path(__file__).parent.glob("*.py")))
).hexdigest()[:16]

install_config_module(sys.modules[__name__])
