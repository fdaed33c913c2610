// Remembered Meta answers and passed call checks: what the engine needs to know of a call before
// it runs.
//
// [marker: shape-cache]
// Note [Shape cache]
// The asynchronous path learns each call's output sizes, strides and dtypes by running the
// operator's Meta kernel: ATen's C++ one where there is one (Note [C++ Meta kernels] in
// CppMeta.h), else the dispatcher's, often a Python function (torch._refs, torch._meta_
// registrations) costing far more than a small kernel (docs/performance.md has the figures). A
// Meta kernel can only see metadata, so its answer is a function of:
//   - every tensor argument's sizes, strides, dtype, layout, device type,
//     conjugate/negative bits and whether it is a wrapped number (a Python scalar made a tensor,
//     which type promotion treats as a scalar: int64 + 1.0 is float32, int64 + a 0-dim float64
//     tensor is float64). Not the value of a CPU scalar tensor: optimizers pass one that
//     changes every step (Adam's bias corrections), and no Meta kernel derives a shape from one
//     (those that would need a value, like repeat_interleave's, refuse, and refusals run on the
//     CPU kernel);
//   - every other argument's value (ints, bools, strings, int lists, devices, None), except
//     a generator's (a Meta kernel draws no numbers) and a Scalar's or a float's (Note [Scalar
//     values are not keyed]);
//   - the default dtype (factories without a dtype);
//   - for the call checks, which run before the Meta kernel is asked (Note [Call checks are
//     remembered] in CallChecks.h): which tensor arguments share storage with a tensor the
//     operator writes, and the deterministic-algorithms mode.
// A Signature is exactly that, packed into words. The engine asks the Meta kernel once per
// (operator, signature) and keeps the answer in the operator's ShapeCache: the output shapes,
// the shapes of written arguments the kernel resized, or "declined" (the Meta kernel refused a
// call the CPU kernel accepts: data-dependent shapes, which go to the synchronizing path). Errors
// are not kept: a call that failed asks the Meta kernel again, and raises again at its call site.
// Beside the answer the cache keeps whether the call checks passed for the signature (Note [Call
// checks are remembered] in CallChecks.h).
// Arguments the signature cannot describe (a symbolic size, an object) make a call uncached.
// A cache holds at most kMaxEntries signatures per operator; a full cache is emptied.
//
// [marker: scalar-values-not-keyed]
// Note [Scalar values are not keyed]
// Optimizers pass new numbers every step: a learning-rate schedule changes `alpha` in
// `_foreach_add_`, Adam's foreach path passes per-parameter step sizes as a Scalar list to
// `_foreach_addcdiv_.ScalarList`, fused optimizers take `lr` as a float. With those values in the
// key, every step missed the cache and ran the Meta kernel (9 Meta runs per GPT-2 AdamW step), and
// a cache filled with signatures never seen again. An argument of schema type Scalar, Scalar?,
// Scalar[], float or float? is therefore keyed by its kind only (int, float, complex, bool, None):
// the kind takes part in type promotion (a float Scalar turns an integer tensor's result into a
// float one), its value does not, and no Meta kernel derives a shape from such a value, with two
// exceptions, `arange` and `range`, whose Scalars are the bounds of the result
// (OpTraits::scalarsSetShape). `float[]` stays keyed by value: interpolation's scale factors set
// the output size. The cost: an error a Meta kernel raises for a value alone (pow of an integer
// tensor to a negative integer Scalar) is raised at the call the first time per signature; with the
// signature cached, the CPU kernel raises the same error in the task, reported as every task error
// is (docs/errors.md).
#pragma once

#include <ATen/core/ivalue.h>
#include <c10/core/ScalarType.h>
#include <c10/util/SmallVector.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>
#include <vector>

namespace openreg::engine {

struct TensorShape {
  c10::SmallVector<int64_t, 5> sizes;
  c10::SmallVector<int64_t, 5> strides;
  c10::ScalarType dtype = c10::ScalarType::Undefined;  // Undefined: an undefined tensor
};

// The Meta kernel's answer for one signature.
struct MetaAnswer {
  bool declined = false;  // no shapes ahead for this signature: take the synchronizing path
  // One per return that is not a written argument, in order.
  struct Result {
    enum class Kind { Tensor, TensorList, Value } kind = Kind::Value;
    std::vector<TensorShape> tensors;  // Tensor: one; TensorList: each
    c10::IValue value;                 // Value: returned as is (None)
  };
  std::vector<Result> results;
  // Written arguments (out=, in-place) the Meta kernel resized: argument index, new shape.
  std::vector<std::pair<size_t, TensorShape>> written;
  // Every result is one defined tensor: an .out overload can take them all (with one undefined,
  // as an output_mask makes, the functional kernel runs instead).
  bool everyResultATensor = false;
};

// What the engine knows of one call signature.
struct KnownCall {
  std::shared_ptr<const MetaAnswer> answer;  // the Meta kernel's; null: not asked yet
  bool checked =
      false;  // the call checks passed without an error or a warning (Note [Call checks])
};

class Signature {
 public:
  // Packs a call's arguments; false when one cannot be described (the call is not cached).
  // Bit i of `kindOnly` set: argument i is keyed by its kind, not its value (Note [Scalar values
  // are not keyed]). Bit i of `written` set: argument i is a tensor the operator writes, and the
  // other tensor arguments that share its storage are keyed (Note [Call checks are remembered]).
  // `mode`: the call's deterministic-algorithms mode, as CallState::capture reads it (bit 0 on,
  // bit 1 warn only).
  bool build(c10::ArrayRef<c10::IValue> args, uint64_t kindOnly, uint64_t written, int mode);

  bool operator==(const Signature& other) const { return words_ == other.words_; }
  size_t hash() const { return hash_; }

 private:
  bool add(const c10::IValue& value, bool kindOnly);
  void addTensor(const at::Tensor& t);
  void addSharedStorage(c10::ArrayRef<c10::IValue> args, uint64_t written);
  void push(int64_t word);

  c10::SmallVector<int64_t, 48> words_;  // most calls fit without a heap allocation
  size_t hash_ = 0;
};

class ShapeCache {
 public:
  static constexpr size_t kMaxEntries = 1024;

  KnownCall find(const Signature& signature) const;
  void remember(const Signature& signature, std::shared_ptr<const MetaAnswer> answer);
  void rememberChecked(const Signature& signature);

 private:
  struct Hash {
    size_t operator()(const Signature& s) const { return s.hash(); }
  };
  KnownCall& entry(const Signature& signature);  // with mutex_ held
  mutable std::mutex mutex_;
  std::unordered_map<Signature, KnownCall, Hash> known_;
};

}  // namespace openreg::engine
