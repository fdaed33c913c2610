"""vLLM on openreg: a platform plugin (docs/vllm.md).

With vLLM and torch_openreg installed, vLLM finds the platform through the `vllm.platform_plugins`
entry point (`torch_openreg_autoload.vllm_platform`) and runs models on openreg devices:

    from vllm import LLM
    llm = LLM(model="path/to/model", dtype="float32")

| module | what vLLM asks of it |
|---|---|
| `platform` | `OpenRegPlatform`: device, dispatch key, worker class, attention backend, memory, features |
| `worker` | `OpenRegWorker`, `OpenRegModelRunner`: vLLM's GPU worker and v1 runner on `openreg:<rank>` |
| `attention` | `OpenRegAttentionBackend`: paged attention with PyTorch operators |
| `graphs` | `OpenRegGraphWrapper`: vLLM's graphs captured and replayed with `torch.accelerator.Graph` |
| `kernels` | PyTorch forms of the Triton kernels on the runner's path |

Importing this package needs vLLM (it raises ModuleNotFoundError naming it otherwise).
"""

from .platform import OpenRegPlatform

__all__ = ["OpenRegPlatform"]
