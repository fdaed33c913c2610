// Walking and rebuilding an operator's boxed arguments, and putting its results on the stack:
// shared by the engine's paths and the copying fallback.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <ATen/core/stack.h>

#include <span>

#include "aten/KernelAlias.h"
#include "aten/engine/OpTraits.h"

namespace openreg::engine {

// The dispatch keys that run an operator's CPU kernel (op.redispatchBoxed(kCpuKeys, stack)).
inline constexpr c10::DispatchKeySet kCpuKeys{c10::DispatchKey::CPU};

// Applies `fn` to every tensor inside an argument (a tensor, a list, a list of optionals).
template <class F>
void forEachTensor(const c10::IValue& value, F&& fn) {
  if (value.isTensor()) {
    fn(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList()) fn(t);
  } else if (value.isList()) {
    for (const c10::IValue& element : value.toListRef()) {
      if (element.isTensor()) fn(element.toTensor());
    }
  }
}

// Rebuilds an argument with every openreg tensor replaced by fn(tensor).
template <class F>
c10::IValue mapTensors(const c10::IValue& value, F&& fn) {
  if (value.isTensor()) {
    const at::Tensor& t = value.toTensor();
    return isOpenReg(t) ? c10::IValue(fn(t)) : value;
  }
  if (value.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : value.toTensorList()) out.push_back(isOpenReg(t) ? fn(t) : t);
    return out;
  }
  if (value.isList() && value.toListRef().size() > 0) {
    const auto elementType = value.toList().elementType();
    if (isTensorType(elementType)) {
      c10::List<std::optional<at::Tensor>> out;
      for (const c10::IValue& element : value.toListRef()) {
        if (element.isTensor() && isOpenReg(element.toTensor())) {
          out.push_back(fn(element.toTensor()));
        } else {
          out.push_back(element.isTensor() ? std::optional<at::Tensor>(element.toTensor())
                                           : std::nullopt);
        }
      }
      return out;
    }
  }
  return value;
}

// The arguments of a call asked of another device (Meta for shapes, the CPU for empty inputs):
// every openreg tensor replaced by standIn(tensor), and a factory's device argument moved too
// (asked on openreg, the call would come straight back to this engine, without end:
// tril_indices(..., device="openreg")).
template <class F>
torch::jit::Stack standIns(c10::ArrayRef<c10::IValue> args, c10::DeviceType target, F&& standIn) {
  torch::jit::Stack stack;
  stack.reserve(args.size());
  for (const c10::IValue& arg : args) {
    if (arg.isDevice() && arg.toDevice().type() == c10::DeviceType::PrivateUse1) {
      stack.emplace_back(c10::Device(target));
    } else {
      stack.push_back(mapTensors(arg, standIn));
    }
  }
  return stack;
}

// An argument as a task may hold it: see Note [Tasks hold no Python-visible tensor] in
// KernelAlias.h. Device tensors become kernel aliases; CPU tensors (0-dim scalars, the only ones
// findDevice lets through) become fresh clones.
c10::IValue taskArgument(const c10::IValue& arg);

// A call's new results, in return order (write-aliased returns are not among them): what the
// asynchronous and synchronizing paths give back.
using FreshResults = c10::SmallVector<c10::IValue, 4>;

// Replaces the arguments on `stack` by the operator's results: new tensors (`fresh`, in return
// order), or for write-aliased returns the arguments themselves.
void pushResults(const c10::FunctionSchema& schema, torch::jit::Stack* stack,
                 c10::ArrayRef<c10::IValue> args, std::span<c10::IValue> fresh);

}  // namespace openreg::engine
