"""Compiled kernels on the stream: the typed trampoline emitted beside each kernel Inductor
compiles for openreg, and the launcher the generated graph calls instead of the kernel's Python
binding. See Note [Compiled kernel launch] in csrc/inductor/CompiledKernel.h.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable
from typing import Any, NoReturn

from torch._inductor.codecache import CodeCacheFuture, LambdaFuture

from .. import _C
from .._C import DEVICE_NAME

TRAMPOLINE = "openreg_trampoline"


class ArgKind(enum.IntEnum):
    """How the trampoline reads one argument (csrc/inductor/CompiledKernel.h, ArgKind)."""

    INPUT = 0
    INPUT_OUTPUT = 1
    OUTPUT = 2
    INTEGER = 3
    FLOATING = 4


_FLOATING = {"float", "double", "half", "bfloat16", "at::Half", "at::BFloat16", "c10::Half", "c10::BFloat16"}
_SIGNATURE = re.compile(r'extern "C"[^;{(]*?\bvoid\s+(\w+)\s*\(([^)]*)\)')


def parse_signature(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The entry function's name and its parameters as (C++ type, name), from the kernel source:
    the last `extern "C" void name(...)`, as Inductor's CppScheduling.define_kernel finds it."""
    matches = list(_SIGNATURE.finditer(source))
    if not matches:
        raise RuntimeError(f'{DEVICE_NAME}: found no extern "C" entry function in a kernel Inductor generated')
    entry, params = matches[-1].group(1), matches[-1].group(2)
    parsed = []
    for param in filter(None, (p.strip() for p in params.split(","))):
        ctype, _, name = param.rpartition(" ")
        if "*" in name:  # "float *out_ptr0"
            ctype, name = ctype + "*" * name.count("*"), name.lstrip("*")
        parsed.append((ctype.strip(), name))
    return entry, parsed


def arg_kind(ctype: str, name: str) -> ArgKind:
    if "*" in ctype:
        if ctype.startswith("const "):
            return ArgKind.INPUT
        return ArgKind.INPUT_OUTPUT if name.startswith("in_out_ptr") else ArgKind.OUTPUT
    base = ctype.removeprefix("const ").strip()
    return ArgKind.FLOATING if base in _FLOATING else ArgKind.INTEGER


# [marker: kernel-trampoline]
def trampoline(entry: str, params: list[tuple[str, str]]) -> str:
    """C++ appended to the kernel source: `openreg_trampoline(const uint64_t* slots)` calls the
    entry with each slot converted to its parameter's own type (pointers, integers, and doubles
    bit-copied into the slot, converted to float or double here, where the compiler knows)."""
    args = []
    for i, (ctype, name) in enumerate(params):
        kind = arg_kind(ctype, name)
        base = ctype.removeprefix("const ").strip()
        if kind in (ArgKind.INPUT, ArgKind.INPUT_OUTPUT, ArgKind.OUTPUT):
            args.append(f"reinterpret_cast<{ctype}>(slots[{i}])")
        elif kind == ArgKind.FLOATING:
            args.append(f"static_cast<{base}>(openreg_slot_double(slots[{i}]))")
        else:
            args.append(f"static_cast<{base}>(static_cast<int64_t>(slots[{i}]))")
    call = ", ".join(args)
    return (
        "\n#include <cstdint>\n#include <cstring>\n"
        "static inline double openreg_slot_double(uint64_t bits) {\n"
        "  double value;\n  std::memcpy(&value, &bits, sizeof(value));\n  return value;\n}\n"
        f'extern "C" __attribute__((visibility("default"))) void {TRAMPOLINE}(const uint64_t* slots) {{\n'
        f"  {entry}({call});\n}}\n"
    )


def launcher(compile_kernel: Callable[[], Any], kinds: list[int], name: str, graph: str) -> Any:
    """The callable the graph calls for kernel `name`: a `_C._CompiledKernel` bound to the
    trampoline in the library that `compile_kernel()` builds (it returns the kernel's Python
    binding, or the future Inductor's parallel compile returns for it: then a future of the
    launcher, which the graph's `async_compile.wait` resolves). A kernel that fails to build
    raises naming itself and its graph, with the compiler's error chained."""

    def failed(error: Exception) -> NoReturn:
        raise RuntimeError(
            f"{DEVICE_NAME}: compiled kernel {name} of graph {graph} failed to build: {error}"
        ) from error

    def make(loaded: Any) -> Any:
        # The binding is a function of the extension module Inductor loaded from the library.
        return _C._CompiledKernel(loaded.__self__.__file__, TRAMPOLINE, kinds, name, graph)

    try:
        binding = compile_kernel()
    except Exception as error:  # noqa: BLE001  any build failure is reported with the kernel's name
        failed(error)
    if isinstance(binding, CodeCacheFuture):

        def resolve() -> Any:
            try:
                loaded = binding.result()
            except Exception as error:  # noqa: BLE001
                failed(error)
            return make(loaded)

        return LambdaFuture(resolve)
    return make(binding)


from . import ready  # noqa: E402  (Note [Registration when Dynamo and Inductor load])

ready(__name__)
