// Unboxed entries for the operators a training step calls most, which run the engine on borrowed
// arguments.
//
// [marker: engine-borrowed-arguments]
// Note [Borrowed arguments]
// The backend fallback is boxed: the dispatcher copies each argument into an IValue of a stack,
// and the copy of a tensor raises its reference count. A tensor that only Python holds has a count
// of 1, and in torch 2.13 a count going from 1 to 2 makes the tensor keep its Python object
// alive (TensorImpl::incref_pyobject), which takes the GIL; going back to 1, dropping the stack,
// takes it again. The Python binding has released the GIL before dispatching, so `a + b` on two
// Python tensors took it four times on the host, about a fifth of the host's instructions for a
// tiny call (docs/performance.md, "Where a call's host time goes").
// The operators below get a kernel of their own, unboxed. Their tensor arguments go into IValues
// that borrow them (no count change; the caller's references keep them alive for the call), the
// engine runs on that view (runCall: nothing in it drops or replaces an argument, and what must
// outlive the call, a task's arguments, is made from them: Note [Tasks hold no Python-visible
// tensor] in KernelAlias.h), and the borrows are released without a count change, also when the
// call throws. The results are the engine's, as the boxed path gives them.
// An operator here returns a new tensor, or in place its first argument (a static_assert checks
// the schema's types). One that needed CPU index tensors moved (traits.indexLists) or were a view
// would take the boxed route with owned arguments.
#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_log_softmax_backward_data_ops.h>
#include <ATen/ops/_log_softmax_ops.h>
#include <ATen/ops/_softmax_backward_data_ops.h>
#include <ATen/ops/_softmax_ops.h>
#include <ATen/ops/add_ops.h>
#include <ATen/ops/addcdiv_ops.h>
#include <ATen/ops/addcmul_ops.h>
#include <ATen/ops/addmm_ops.h>
#include <ATen/ops/bmm_ops.h>
#include <ATen/ops/clamp_min_ops.h>
#include <ATen/ops/div_ops.h>
#include <ATen/ops/exp_ops.h>
#include <ATen/ops/gelu_backward_ops.h>
#include <ATen/ops/gelu_ops.h>
#include <ATen/ops/lerp_ops.h>
#include <ATen/ops/maximum_ops.h>
#include <ATen/ops/mean_ops.h>
#include <ATen/ops/mm_ops.h>
#include <ATen/ops/mul_ops.h>
#include <ATen/ops/neg_ops.h>
#include <ATen/ops/pow_ops.h>
#include <ATen/ops/rsqrt_ops.h>
#include <ATen/ops/sigmoid_backward_ops.h>
#include <ATen/ops/sigmoid_ops.h>
#include <ATen/ops/silu_ops.h>
#include <ATen/ops/sqrt_ops.h>
#include <ATen/ops/sub_ops.h>
#include <ATen/ops/sum_ops.h>
#include <ATen/ops/tanh_backward_ops.h>
#include <ATen/ops/tanh_ops.h>
#include <ATen/ops/threshold_backward_ops.h>
#include <ATen/ops/where_ops.h>
#include <torch/library.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "aten/engine/Engine.h"
#include "core/TaskWarnings.h"

namespace openreg::engine {
namespace {

using BorrowTraits = c10::MaybeOwnedTraits<at::Tensor>;

template <class T>
constexpr bool kIsTensorRef =
    std::is_same_v<std::remove_cvref_t<T>, at::Tensor>&& std::is_reference_v<T>;

// The arguments as IValues, the tensors among them borrowed. Released without a count change.
class BorrowedArguments {
 public:
  template <class... A>
  explicit BorrowedArguments(A&&... args) {
    values_.reserve(sizeof...(A));
    (add(std::forward<A>(args)), ...);
  }
  ~BorrowedArguments() {
    for (c10::IValue& value : values_) {
      if (!value.isTensor()) continue;
      at::Tensor borrowed = std::move(value).toTensor();
      BorrowTraits::destroyBorrow(borrowed);
    }
  }
  BorrowedArguments(const BorrowedArguments&) = delete;
  BorrowedArguments& operator=(const BorrowedArguments&) = delete;

  c10::ArrayRef<c10::IValue> view() const { return values_; }
  // Owned copies, for the boxed route.
  torch::jit::Stack owned() const { return torch::jit::Stack(values_.begin(), values_.end()); }

 private:
  template <class T>
  void add(T&& arg) {
    if constexpr (kIsTensorRef<T>) {
      values_.emplace_back(BorrowTraits::createBorrow(arg));
    } else {
      values_.emplace_back(std::forward<T>(arg));
    }
  }

  c10::SmallVector<c10::IValue, 6> values_;
};

template <class Op, class Schema = typename Op::schema>
struct BorrowingEntry;

template <class Op, class R, class... A>
struct BorrowingEntry<Op, R(A...)> {
  static_assert(std::is_same_v<R, at::Tensor> ||
                    (std::is_same_v<R, at::Tensor&> &&
                     std::is_same_v<std::tuple_element_t<0, std::tuple<A...>>, at::Tensor&>),
                "an entry returns a new tensor, or (in place) its first argument");

  // [marker: engine-borrowing-entry]
  static R call(A... args) {
    static const c10::OperatorHandle op =
        c10::Dispatcher::singleton().findSchemaOrThrow(Op::name, Op::overload_name);
    deliverTaskWarnings();  // Note [Task warnings]
    OpTraits& traits = traitsFor(op);
    BorrowedArguments borrowed(args...);
    FreshResults fresh;
    const bool borrowable = traits.indexLists.empty() && !traits.view;
    if (!borrowable || !runCall(op, traits, borrowed.view(), &fresh)) {
      torch::jit::Stack stack = borrowed.owned();
      runOnEngine(op, &stack);
      if constexpr (std::is_same_v<R, at::Tensor>) return std::move(stack.back()).toTensor();
    }
    if constexpr (std::is_same_v<R, at::Tensor&>) {
      return std::get<0>(std::forward_as_tuple(args...));
    } else {
      return std::move(fresh.front()).toTensor();
    }
  }
};

// The operators a training step calls most, from Python (where their arguments are often held by
// Python alone) and from autograd. Each has a CPU kernel, a Meta kernel and no openreg kernel of
// its own (the engine would otherwise take it: Note [Structured operators on the engine]).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("add.Tensor", TORCH_FN(BorrowingEntry<at::_ops::add_Tensor>::call));
  m.impl("add_.Tensor", TORCH_FN(BorrowingEntry<at::_ops::add__Tensor>::call));
  m.impl("sub.Tensor", TORCH_FN(BorrowingEntry<at::_ops::sub_Tensor>::call));
  m.impl("sub_.Tensor", TORCH_FN(BorrowingEntry<at::_ops::sub__Tensor>::call));
  m.impl("mul.Tensor", TORCH_FN(BorrowingEntry<at::_ops::mul_Tensor>::call));
  m.impl("mul_.Tensor", TORCH_FN(BorrowingEntry<at::_ops::mul__Tensor>::call));
  m.impl("div.Tensor", TORCH_FN(BorrowingEntry<at::_ops::div_Tensor>::call));
  m.impl("div_.Tensor", TORCH_FN(BorrowingEntry<at::_ops::div__Tensor>::call));
  m.impl("sum.dim_IntList", TORCH_FN(BorrowingEntry<at::_ops::sum_dim_IntList>::call));
  m.impl("mean.dim", TORCH_FN(BorrowingEntry<at::_ops::mean_dim>::call));
  m.impl("mm", TORCH_FN(BorrowingEntry<at::_ops::mm>::call));
  m.impl("addmm", TORCH_FN(BorrowingEntry<at::_ops::addmm>::call));
  m.impl("bmm", TORCH_FN(BorrowingEntry<at::_ops::bmm>::call));
  m.impl("where.self", TORCH_FN(BorrowingEntry<at::_ops::where_self>::call));
  m.impl("clamp_min", TORCH_FN(BorrowingEntry<at::_ops::clamp_min>::call));
  m.impl("clamp_min_", TORCH_FN(BorrowingEntry<at::_ops::clamp_min_>::call));
  m.impl("threshold_backward", TORCH_FN(BorrowingEntry<at::_ops::threshold_backward>::call));
  m.impl("neg", TORCH_FN(BorrowingEntry<at::_ops::neg>::call));
  m.impl("exp", TORCH_FN(BorrowingEntry<at::_ops::exp>::call));
  m.impl("tanh", TORCH_FN(BorrowingEntry<at::_ops::tanh>::call));
  m.impl("sigmoid", TORCH_FN(BorrowingEntry<at::_ops::sigmoid>::call));
  m.impl("sqrt", TORCH_FN(BorrowingEntry<at::_ops::sqrt>::call));
  m.impl("rsqrt", TORCH_FN(BorrowingEntry<at::_ops::rsqrt>::call));
  m.impl("gelu", TORCH_FN(BorrowingEntry<at::_ops::gelu>::call));
  m.impl("silu", TORCH_FN(BorrowingEntry<at::_ops::silu>::call));
  m.impl("pow.Tensor_Scalar", TORCH_FN(BorrowingEntry<at::_ops::pow_Tensor_Scalar>::call));
  m.impl("maximum", TORCH_FN(BorrowingEntry<at::_ops::maximum>::call));
  m.impl("addcmul_", TORCH_FN(BorrowingEntry<at::_ops::addcmul_>::call));
  m.impl("addcdiv_", TORCH_FN(BorrowingEntry<at::_ops::addcdiv_>::call));
  m.impl("lerp_.Scalar", TORCH_FN(BorrowingEntry<at::_ops::lerp__Scalar>::call));
  m.impl("_softmax", TORCH_FN(BorrowingEntry<at::_ops::_softmax>::call));
  m.impl("_log_softmax", TORCH_FN(BorrowingEntry<at::_ops::_log_softmax>::call));
  m.impl("gelu_backward", TORCH_FN(BorrowingEntry<at::_ops::gelu_backward>::call));
  m.impl("tanh_backward", TORCH_FN(BorrowingEntry<at::_ops::tanh_backward>::call));
  m.impl("sigmoid_backward", TORCH_FN(BorrowingEntry<at::_ops::sigmoid_backward>::call));
  m.impl("_softmax_backward_data",
         TORCH_FN(BorrowingEntry<at::_ops::_softmax_backward_data>::call));
  m.impl("_log_softmax_backward_data",
         TORCH_FN(BorrowingEntry<at::_ops::_log_softmax_backward_data>::call));
}

}  // namespace
}  // namespace openreg::engine
