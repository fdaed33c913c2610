// What an operator's schema says about how the engine may run it, computed once per operator.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <optional>
#include <vector>

#include "aten/engine/CallChecks.h"
#include "aten/engine/ShapeCache.h"

namespace openreg::engine {

struct OpTraits {
  explicit OpTraits(c10::OperatorName operatorName) : name(std::move(operatorName)) {}

  c10::OperatorName name;         // the operator these traits describe
  bool view = false;              // returns an alias it does not write
  bool mutates = false;           // writes arguments (in-place, out=), and returns only those
  bool inPlaceOnly = false;       // mutates, and no written argument is an out= one
  bool random = false;            // takes a Generator
  int generatorIndex = -1;        // random operators: the Generator argument's index
  bool cpuGeneratorOnly = false;  // draws random numbers without a Generator argument
  bool hostResult = false;        // returns something other than tensors
  bool cpuKernel = false;  // the CPU has a kernel the engine can run (some operators are CUDA-only)
  bool callingThread = false;  // runs on the calling thread: its CPU kernel may be Python
  bool outKeepsShapeOfSameCount = false;  // Note [Sequence factories keep their out's shape]
  bool overwritesSelf = false;  // writes every element of self without reading it (random_, ...)
  bool shapesFromCpu = false;   // result shapes learned from the CPU kernel, not the Meta kernel
  std::optional<c10::OperatorHandle> outVariant;  // functional operators: the matching .out
  std::atomic<bool> outVariantFaithful{true};     // false once its CPU kernel regrew an output
  // The .out kernel is right only for a first argument contiguous in some memory format (Note
  // [Out kernels that need a contiguous input] in OpTraits.cpp).
  bool outNeedsContiguousInput = false;
  std::vector<size_t> newReturns;  // the returns that are not written arguments, in order
  std::vector<size_t> indexLists;  // Tensor?[] arguments (indices), which may hold CPU tensors
  // Bit i set: argument i (a Scalar or float) is keyed in the shape cache by its kind, not its
  // value (Note [Scalar values are not keyed] in ShapeCache.h).
  uint64_t kindOnlyArguments = 0;
  // Bit i set: argument i is a Tensor the operator writes (Note [Call checks are remembered]).
  uint64_t writtenTensors = 0;
  CallChecks callChecks;           // Note [Call checks]
  std::atomic<int> metaWorks{-1};  // learned at the first call: -1 unknown, 0 no Meta kernel, 1 yes
  // ATen's C++ Meta kernel, asked in place of the dispatcher's (Note [C++ Meta kernels] in
  // CppMeta.h); nullptr when the operator has none.
  const c10::KernelFunction* cppMeta = nullptr;
  ShapeCache shapes;  // Meta answers per call signature (Note [Shape cache])
};

// The traits of `op`. The first call per operator computes them; later calls on the same thread
// find them without a lock.
OpTraits& traitsFor(const c10::OperatorHandle& op);

bool isTensorType(const c10::TypePtr& type);     // Tensor, Tensor?, Tensor[], Tensor?[]
bool isGeneratorType(const c10::TypePtr& type);  // Generator, Generator?

}  // namespace openreg::engine
