// Checks a CPU kernel makes on its arguments alone, where PyTorch's Meta kernel does not make them.
//
// [marker: engine-call-checks]
// Note [Call checks]
// The asynchronous path raises at the call what the Meta kernel refuses (shape, dtype and device
// errors, in the CPU kernel's words: Note [Meta errors at the call] below); what only the CPU
// kernel checks is raised in the task, and reaches the program at the
// next synchronization (docs/errors.md). A check that needs no data (a dtype, a Scalar's kind or
// value) runs at the call instead, where the CPU raises it, with the CPU's words, exception type
// and warnings, for the operators whose Meta kernel lacks it (found by PyTorch's own tests,
// docs/conformance.md):
//  - index_fill with a complex value on a real tensor, complex() of two dtypes, randperm's n too
//    large for its out's dtype, add's and sub's alpha for the result's dtype: the CPU's checks,
//    written here or called from ATen's headers;
//  - the in-place random operators (random_'s bounds for the dtype, uniform_'s, normal_'s std):
//    the CPU kernel itself runs on stand-ins of at most one element per dimension, drawing from a
//    generator of its own, so every check and warning is the CPU's and no user generator moves.
//    The task's kernel then repeats those warnings: an operator with a call check drops its task's
//    warnings;
//  - the same stand-ins, asked only when a cheap predicate says the CPU may refuse the call (the
//    common call pays a comparison, no kernel): an out= of another dtype than the input's for the
//    operators whose CPU kernel wants it exact (neg, round, amax, sort, mode, ...); all/any into a
//    non-bool out; floor/ceil/trunc/round of a complex input; an upsample of an integer input;
//    gelu's `approximate` other than "none" and "tanh" (checked in the CPU kernel's body, which
//    ATen's C++ Meta kernel, Note [C++ Meta kernels] in CppMeta.h, does not run);
//    any operator on a tensor of more than 64 dimensions (TensorIterator's limit);
//  - index_put_'s dtypes, its indices broadcasting together (an IndexError, as on the CPU) and its
//    values expanding to the indexing result, unless an index is a mask (its count is data);
//    searchsorted's and bucketize's ATen searchsorted_pre_check on memoryless stand-ins of the
//    true sizes; masked_scatter_'s mask expanding to self; put_ refused in deterministic mode
//    (refused in the task, the failure would also have poisoned self, which the CPU leaves
//    untouched); arange's out= of another count, resized with the CPU's own warning; the backward
//    of in-place leaky_relu and elu with a negative slope, which the CPU refuses;
//  - a written argument that overlaps itself (an expanded tensor) for the operators whose CPU
//    kernel refuses one (masked_scatter_, put_, scatter_, bernoulli_, cat.out, linspace.out):
//    ATen's own assert_no_internal_overlap; for every other operator that writes, such an
//    argument (rare) is asked of the CPU kernel on stand-ins of the same layout, since some
//    refuse it (elu_, add_) and some write it (fill_, zero_); and assert_no_overlap between a
//    written argument and the inputs (index_add_, index_fill_, index_put_, masked_fill_, scatter_,
//    put_ and others);
//  - the deprecation warning of index_put_, index_fill_ and masked_fill_ on an expanded self;
//  - for every operator that writes, TensorIterator's refusal of a written argument that
//    partially overlaps an input (x[:-1].add_(x[1:])): on the engine's aliases, one storage each,
//    the CPU kernel cannot see the overlap, and a Meta kernel has no addresses to compare;
//  - an out= argument that shares memory with an input at all: the CPU kernel on stand-ins that
//    share memory as the device tensors do (masked_select, take, cat and kthvalue refuse even a
//    full overlap, which the engine's aliases hid: found by OpInfo's error inputs);
//  - masked_scatter_'s non-bool mask and complex()'s out= of another dtype than its parts'
//    complex one, asked of the CPU kernel when the predicate says so.
// Checks that need data (an index's bounds, a std tensor's values) stay in the task.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <vector>

#include "aten/engine/ShapeCache.h"

namespace openreg::engine {

using CallCheck = void (*)(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                           c10::Device device);

struct CallChecks {
  std::vector<CallCheck> checks;  // in order
  bool warn = false;  // the checks give the CPU kernel's warnings: the task's repeats are dropped
  // The checks read Scalar values (the random operators' bounds): the operator's signatures key
  // them (Note [Call checks are remembered]).
  bool readValues = false;
};
CallChecks callChecksFor(const c10::FunctionSchema& schema);

// [marker: engine-call-checks-remembered]
// Note [Call checks are remembered]
// A call check is a function of what the call's Signature holds (ShapeCache.h): sizes, strides,
// offsets, dtypes, the kinds of Scalars, the tensors sharing storage with a written one, the
// deterministic mode. So the checks run once per signature, and a signature they passed without
// an error or a warning is remembered in the operator's ShapeCache beside its Meta answer: a
// later call with it pays the one lookup the asynchronous path makes anyway, and no check. A
// signature that raised is not remembered (the call raises again); one that warned is not either
// (the CPU warns on every call, and so does openreg). Two consequences:
//  - the checks that run the CPU kernel on stand-ins (the in-place random operators, an out=
//    sharing memory with an input, as mul_(Scalar) passes itself to mul.out) run once per
//    signature: a steady loop runs no kernel on the host (the ledger's check_kernels counts each);
//  - a check that depends on a Scalar's value needs that value keyed: the random operators' bounds
//    (uniform_'s from <= to, normal_'s std >= 0) are values, so those operators key their Scalars'
//    values (CallChecks::readValues). For every other operator a refusal that depends on a Scalar's
//    value alone, met once the signature passed with another value, is raised in the task, as
//    Note [Scalar values are not keyed] in ShapeCache.h says of the Meta kernel's.
// `signature` null: the call cannot be keyed, and every check runs.
void runCallChecks(const CallChecks& checks, ShapeCache& known, const Signature* signature,
                   const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                   c10::Device device);

// [marker: engine-cpu-error-at-call]
// Note [The CPU's error at the call]
// One mechanism raises a CPU kernel's error at the call without touching device data: the CPU
// kernel on CPU stand-ins of the call's tensors (zeros of the same sizes and strides, over zero
// pages when large; a generator of its own), its error rethrown naming the device, its warnings
// dropped unless the check gives them (the task repeats them), one check kernel counted in the
// ledger. Its three users: the call checks above (askCpuIf, the random operators, the overlap
// checks), a Meta kernel's refusal (below), and a call whose device tensors are all empty (Note
// [Errors of empty inputs] in AsyncPath.cpp).
//
// Note [Meta errors at the call]
// The Meta kernel refused a call. Either the call is wrong (a shape, dtype or device error) or the
// Meta kernel cannot answer without data (repeat_interleave without output_size). The CPU kernel
// tells which, at the call and without synchronizing: it runs on zero stand-ins of the same sizes
// and strides (mapped pages that cost nothing until written). If it raises, that is the call's
// error, in the CPU's words and exception type; the Meta kernel's own words often differ (add's
// Python Meta kernel says "Attempting to broadcast a dimension of length 4", the CPU "The size of
// tensor a (3) must match the size of tensor b (4)"). If it does not raise, this returns and the
// call takes the synchronizing path, where the CPU kernel runs on the data. An earlier task's
// failure therefore never replaces a call's own shape error: it stays pending for the next
// synchronization.
void raiseCpuErrorAtCall(const c10::OperatorHandle& op, c10::ArrayRef<c10::IValue> args,
                         c10::Device device);

}  // namespace openreg::engine
