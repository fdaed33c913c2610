// ATen's own C++ Meta kernels, asked directly for a call's output shapes.
//
// Note [C++ Meta kernels]
// The engine learns a call's output shapes from the operator's Meta kernel (Note [Shape cache] in
// ShapeCache.h). Asked through the dispatcher, the Meta kernel of most operators is a Python
// function: `import torch` registers torch._meta_registrations' decompositions (torch._refs and
// torch._prims) for the Meta key over ATen's C++ ones, which stay registered but inactive
// (torch._C._dispatch_dump shows "Meta (inactive)"). A Python Meta kernel costs 100 to 400
// microseconds per call, and the first one wrapped in torch._disable_dynamo imports
// torch._dynamo, about a second. The shape cache hides that cost while a program repeats its
// shapes; one whose shapes change every step (a generation loop's growing sequence, a batch
// padded to its longest sample, vLLM's batches) paid it on every call (docs/performance.md has the
// figures).
// ATen's C++ Meta kernel of a structured operator is the meta function its CPU kernel runs first
// (TORCH_META_FUNC: checks, type promotion, TensorIterator's output layout), so it answers as the
// CPU does, and in about a microsecond. Each is a plain function, at::meta::<name>, declared in
// ATen/ops/<name>_meta_dispatch.h; the engine keeps one boxed KernelFunction per operator for it
// (CppMetaTable) and calls it in place of the dispatcher's Meta kernel. Operators without one
// (those whose only Meta kernel is Python) are asked through the dispatcher as before.
// The table is generated at build time from the release's own native_functions.yaml and headers
// (gen_cpp_meta.py), so the same sources build against every supported torch.
// [marker: cpp-meta-kernels]
#pragma once

#include <ATen/core/boxing/KernelFunction.h>
#include <ATen/core/operator_name.h>

#include <unordered_map>

namespace openreg::engine {

using CppMetaTable = std::unordered_map<c10::OperatorName, c10::KernelFunction>;

// The C++ Meta kernel of `name`, or nullptr if ATen has none.
const c10::KernelFunction* cppMetaKernel(const c10::OperatorName& name);

// One generated table entry: the operator at::_ops::STRUCT and its Meta function
// at::meta::FUNCTION, cast to the operator's schema type to pick the overload of that name that the
// operator is.
#define OPENREG_CPP_META(STRUCT, FUNCTION)                                                  \
  table.emplace(c10::OperatorName(at::_ops::STRUCT::name, at::_ops::STRUCT::overload_name), \
                c10::KernelFunction::makeFromUnboxedRuntimeFunction(                        \
                    static_cast<at::_ops::STRUCT::schema*>(&at::meta::FUNCTION)))

}  // namespace openreg::engine
