"""Inductor for openreg: its C++ backend (CppScheduling, the CPU's vectorized codegen) compiles
the kernels of openreg graphs, and the Python wrapper launches each one on the device's current
stream through `kernel.launcher` (Note [Compiled kernel launch] in
csrc/inductor/CompiledKernel.h). Extern kernels (mm, convolution, fallbacks) are ordinary
operator calls on openreg tensors, which the eager engine runs.

Registered through Inductor's per-device API `register_backend_for_device` (scheduling and
wrapper); device_op_overrides.py registers what the wrapper writes for device guards.
"""

from __future__ import annotations

import ast
from typing import Any

import torch
from torch._inductor.codegen.common import register_backend_for_device
from torch._inductor.codegen.cpp import CppScheduling
from torch._inductor.codegen.wrapper import PythonWrapperCodegen, SubgraphPythonWrapperCodegen

from .._C import DEVICE_NAME
from . import kernel as _kernel

_BINDING = "async_compile.cpp_pybinding("
# The first line of every kernel OpenRegScheduling defines: how the wrapper tells openreg kernels
# from the CPU kernels of the same graph (a graph that moves a tensor to the CPU has both), and
# what keeps Inductor from reusing a CPU kernel of identical source for openreg (it dedupes
# kernels by source).
_MARK = "// openreg kernel: launched on the stream (torch_openreg/_compile/kernel.py)\n"
_LAUNCHER_IMPORT = "from torch_openreg._compile.kernel import launcher as openreg_launcher"


def _graph_name() -> str:
    """The compile id of the graph being compiled ("0/1": frame 0, its second compilation), which
    names the graph in a kernel's errors; Inductor's own graph name outside Dynamo."""
    compile_id = torch._guards.CompileContext.current_compile_id()
    if compile_id is not None:
        return str(compile_id)
    from torch._inductor.virtualized import V

    return getattr(V.graph, "name", None) or "<unnamed>"


# [marker: wrapper-launch]
class _OpenRegWrapperMixin:
    """What the Python wrapper does differently for openreg: each C++ kernel is defined as a
    launcher over its binding's library, with a trampoline appended to its source, and called
    like a CPU kernel (the launcher queues it on the stream)."""

    def define_kernel(
        self,
        kernel_name: str,
        kernel_body: str,
        metadata: str | None = None,
        gpu: bool = True,
        cpp_definition: str | None = None,
    ) -> None:
        if not gpu and kernel_body.startswith(_BINDING) and _MARK.strip() in kernel_body:
            kernel_body = self._launcher_body(kernel_name, kernel_body)
        super().define_kernel(kernel_name, kernel_body, metadata, gpu, cpp_definition)  # type: ignore[misc]

    def _launcher_body(self, kernel_name: str, body: str) -> str:
        # The body CppScheduling.define_kernel writes: async_compile.cpp_pybinding(<argtypes>, r'''<source>''')
        opening = body.index("r'''")
        closing = body.rindex("'''")
        argtypes = ast.literal_eval(body[len(_BINDING) : opening].strip().rstrip(","))
        source = body[opening + 4 : closing]
        entry, params = _kernel.parse_signature(source)
        if len(params) != len(argtypes):
            raise RuntimeError(
                f"{DEVICE_NAME}: kernel {kernel_name} declares {len(params)} parameters but Inductor passes "
                f"{len(argtypes)} arguments"
            )
        kinds = [int(_kernel.arg_kind(ctype, name)) for ctype, name in params]
        source += _kernel.trampoline(entry, params)
        self.add_import_once(_LAUNCHER_IMPORT)  # type: ignore[attr-defined]
        binding = f"{_BINDING}{argtypes!r}, r'''{source}''')"
        # The binding is built inside the launcher (a lambda), so that a kernel that fails to
        # build is reported with its name and graph.
        return f"openreg_launcher(lambda: {binding}, {kinds!r}, {kernel_name!r}, {_graph_name()!r})"

    def _generate_kernel_call_helper(
        self, kernel_name: str, call_args: Any, *, device: Any = None, triton: bool = True, **kwargs: Any
    ) -> None:
        # PythonWrapperCodegen accepts C++ (non-Triton) kernel calls only for "cpu" and "mps"
        # (torch/_inductor/codegen/wrapper.py, `device {device.type} nyi`). An openreg kernel is
        # called the same way: its launcher takes the arguments the CPU binding would.
        if not triton and device is not None and device.type == DEVICE_NAME:
            self.writeline(self.wrap_kernel_call(kernel_name, call_args))  # type: ignore[attr-defined]
            return
        super()._generate_kernel_call_helper(kernel_name, call_args, device=device, triton=triton, **kwargs)  # type: ignore[misc]

    def make_allocation(self, name: str, device: torch.device, *args: Any, **kwargs: Any) -> str:
        # Inductor enters a device guard around a graph's kernels only for GPU types
        # (torch/_inductor/utils.py, device_need_guard), and allocates with device='<type>': on
        # the current device. An openreg graph names its device's index instead, so a graph
        # compiled for openreg:1 allocates there whatever device is current.
        line = super().make_allocation(name, device, *args, **kwargs)  # type: ignore[misc]
        if device.type == DEVICE_NAME and device.index is not None:
            line = line.replace(f"device='{DEVICE_NAME}'", f"device='{DEVICE_NAME}:{device.index}'")
        return line


class OpenRegWrapperCodegen(_OpenRegWrapperMixin, PythonWrapperCodegen):
    @staticmethod
    def create(
        is_subgraph: bool,
        subgraph_name: str | None,
        parent_wrapper: PythonWrapperCodegen | None,
        partition_signatures: Any = None,
    ) -> PythonWrapperCodegen:
        if is_subgraph:
            return OpenRegSubgraphWrapperCodegen(subgraph_name, parent_wrapper, partition_signatures)
        return OpenRegWrapperCodegen()


class OpenRegSubgraphWrapperCodegen(_OpenRegWrapperMixin, SubgraphPythonWrapperCodegen):
    pass


class OpenRegScheduling(CppScheduling):
    """Inductor's C++ scheduling: the kernels it generates are the CPU's, only marked as openreg's,
    so that the wrapper launches them on the stream."""

    def define_kernel(self, src_code: str, nodes: Any, kernel_args: Any = None) -> str:
        return super().define_kernel(_MARK + src_code, nodes, kernel_args)


def register() -> None:
    from . import config

    register_backend_for_device(DEVICE_NAME, OpenRegScheduling, OpenRegWrapperCodegen, device_custom_config=config)


from . import ready  # noqa: E402  (Note [Registration when Dynamo and Inductor load])

ready(__name__)
