// openreg::Task and openreg::launch: the C++ form of a kernel launch, header-only over the C API.
//
// A Task is a move-only, type-erased `void()` callable with inline storage, so launching a small
// lambda (a few pointers and sizes) allocates nothing. Larger callables, or ones whose move may
// throw, are kept on the heap.
//
// Everything here is compiled by the caller, with the caller's compiler and standard library: a
// Task is a C table of functions (orTaskOps, generated per callable type below) and the bytes of
// the callable, handed to orLaunchTask, which stores them inline in the stream's queue. What
// crosses into libopenreg is C only (Note [Tasks across the C ABI] in runtime.h): a callable that
// throws is caught here, on the caller's side of the boundary, and its failure handed to the
// runtime with orTaskFail (the category of an openreg::TaskError, and the message); the memory it
// declares goes over as an array of orMemoryAccess.
//
// A callable that throws does not take the worker down. Its failure is kept on the stream (the
// next synchronizing call returns it as orErrorLaunchFailure) and, when the callable declares the
// memory it touches, it poisons what it writes: every later task or copy that reads those bytes
// fails with the same error instead of running. See Note [Task errors] in
// runtime/src/Stream.cpp and Note [Poisoned memory] in runtime/src/Poison.h.
#pragma once

#include <openreg/runtime.h>

#include <algorithm>
#include <cstddef>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace openreg {

// One range of device memory a task touches: the C struct (runtime.h), so a list of them crosses
// into the runtime as it is.
using MemoryAccess = orMemoryAccess;

// What a task declares it touches; see Note [Poisoned memory]. Asked for only when some memory is
// poisoned or the task failed, so declaring costs nothing on the fast path. A vector of the
// caller's own standard library: it never crosses into the runtime, only its elements do.
using AccessList = std::vector<MemoryAccess>;

// A task may throw this to give its failure a category (an integer the runtime carries but does not
// interpret; the PyTorch layer maps it to an exception type). Any other exception has category 0.
// Thrown and caught on the caller's side only (Task's run function below).
class TaskError : public std::runtime_error {
 public:
  TaskError(int category, const std::string& what)
      : std::runtime_error(what), category_(category) {}
  int category() const noexcept { return category_; }

 private:
  int category_;
};

// The category of the failure orGetLastErrorMessage describes (0: none, or not a task's).
inline int lastErrorCategory() noexcept {
  int category = 0;
  return orGetLastErrorCategory(&category) == orSuccess ? category : 0;
}

// For work that reads device memory on the host thread after synchronizing (a synchronous
// fallback): orErrorLaunchFailure with the failure that poisoned any byte read, else orSuccess.
// Covering writes are then taken as done: the caller writes them before it next synchronizes.
inline orError_t checkHostAccesses(const AccessList& accesses) {
  return orCheckHostAccesses(accesses.data(), accesses.size());
}

class Task {
 public:
  static constexpr std::size_t kInlineBytes = OR_TASK_INLINE_BYTES;
  static_assert(alignof(std::max_align_t) <= OR_TASK_ALIGNMENT);

  Task() noexcept = default;

  // A callable `void()`, or `void(orTaskContext_t)` for one that reports its failure itself
  // (orTaskFail) rather than by throwing.
  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, Task> &&
                                     (std::is_invocable_r_v<void, D&> ||
                                      std::is_invocable_r_v<void, D&, orTaskContext_t>)>>
  explicit Task(F&& fn) {
    if constexpr (fitsInline<D>()) {
      ::new (static_cast<void*>(storage_)) D(std::forward<F>(fn));
      ops_ = &kInlineOps<D>;
    } else {
      *reinterpret_cast<D**>(storage_) = new D(std::forward<F>(fn));
      ops_ = &kHeapOps<D>;
    }
  }

  Task(Task&& other) noexcept : ops_(other.ops_) {
    if (ops_ != nullptr) ops_->relocate(storage_, other.storage_);
    other.ops_ = nullptr;
  }

  Task& operator=(Task&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = other.ops_;
      if (ops_ != nullptr) ops_->relocate(storage_, other.storage_);
      other.ops_ = nullptr;
    }
    return *this;
  }

  Task(const Task&) = delete;
  Task& operator=(const Task&) = delete;
  ~Task() { reset(); }

  explicit operator bool() const noexcept { return ops_ != nullptr; }

  // Whether the callable declares its memory accesses: a member
  // `void accesses(openreg::AccessList&) const`.
  bool declaresAccesses() const noexcept { return ops_ != nullptr && ops_->accesses != nullptr; }
  // Appends the declared accesses to `out`.
  void accesses(AccessList& out) const {
    if (!declaresAccesses()) return;
    const std::size_t base = out.size();
    for (std::size_t capacity = 8;;) {
      out.resize(base + capacity);
      const std::size_t count = ops_->accesses(storage_, out.data() + base, capacity);
      if (count <= capacity) {
        out.resize(base + count);
        return;
      }
      capacity = count;
    }
  }
  // What the callable calls itself (a member `const char* name() const`, e.g. the operator it
  // runs), or nullptr. Used to describe captured graphs (orGraphDebugDotPrint).
  const char* name() const {
    return ops_ != nullptr && ops_->name != nullptr ? ops_->name(storage_) : nullptr;
  }

  // Runs the callable; a failure goes to `context` (orTaskFail; NULL drops it, which only a
  // caller that knows the task cannot fail may pass). Running an empty Task is a no-op.
  void run(orTaskContext_t context) {
    if (ops_ != nullptr) ops_->run(storage_, context);
  }

  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

  // Takes over a task object handed over as orLaunchTask's `task` (the runtime's side of it):
  // relocates it from `object`, which is left without an object.
  void adopt(const orTaskOps* ops, void* object) noexcept {
    reset();
    ops->relocate(storage_, object);
    ops_ = ops;
  }

  // Gives the object up to orLaunchTask: returns the table and the object's address (nullptr and
  // nullptr for an empty Task), and leaves this Task empty without destroying the object, which
  // is then whoever takes it over's to destroy.
  std::pair<const orTaskOps*, void*> release() noexcept {
    const orTaskOps* ops = ops_;
    ops_ = nullptr;
    return {ops, ops != nullptr ? static_cast<void*>(storage_) : nullptr};
  }

 private:
  // [marker: task-run-function]
  // The callable runs on a worker, called by the runtime through a C function pointer: nothing
  // may unwind into the runtime, which may be built with another C++ library and could not catch
  // it. So the exception is caught here and reported as C.
  template <class D>
  static void runCallable(D& fn, orTaskContext_t context) noexcept {
    try {
      if constexpr (std::is_invocable_r_v<void, D&, orTaskContext_t>) {
        fn(context);
      } else {
        fn();
      }
    } catch (const TaskError& e) {
      orTaskFail(context, e.category(), e.what());
    } catch (const std::exception& e) {
      orTaskFail(context, 0, e.what());
    } catch (...) {
      orTaskFail(context, 0, "a task threw a non-standard exception");
    }
  }

  // The list is built with the caller's library, then copied into the runtime's array.
  template <class D>
  static std::size_t copyAccesses(const D& fn, orMemoryAccess* out, std::size_t capacity) noexcept {
    AccessList list;
    fn.accesses(list);
    std::copy_n(list.begin(), std::min(capacity, list.size()), out);
    return list.size();
  }

  template <class D, class = void>
  struct HasAccesses : std::false_type {};
  template <class D>
  struct HasAccesses<
      D, std::void_t<decltype(std::declval<const D&>().accesses(std::declval<AccessList&>()))>>
      : std::true_type {};

  template <class D, class = void>
  struct HasName : std::false_type {};
  template <class D>
  struct HasName<D, std::void_t<decltype(std::declval<const D&>().name())>> : std::true_type {};

  // The object as the table's functions see it: inline in the storage, or a pointer to it there.
  template <class D, bool kHeap>
  static D& objectOf(void* self) noexcept {
    if constexpr (kHeap) {
      return **static_cast<D**>(self);
    } else {
      return *static_cast<D*>(self);
    }
  }
  template <class D, bool kHeap>
  static const D& objectOf(const void* self) noexcept {
    if constexpr (kHeap) {
      return **static_cast<const D* const*>(self);
    } else {
      return *static_cast<const D*>(self);
    }
  }

  template <class D, bool kHeap>
  static constexpr auto kAccessesOf = [] {
    if constexpr (HasAccesses<D>::value) {
      return +[](const void* self, orMemoryAccess* out, std::size_t capacity) noexcept {
        return copyAccesses(objectOf<D, kHeap>(self), out, capacity);
      };
    } else {
      return static_cast<std::size_t (*)(const void*, orMemoryAccess*, std::size_t)>(nullptr);
    }
  }();

  template <class D, bool kHeap>
  static constexpr auto kNameOf = [] {
    if constexpr (HasName<D>::value) {
      return +[](const void* self) -> const char* { return objectOf<D, kHeap>(self).name(); };
    } else {
      return static_cast<const char* (*)(const void*)>(nullptr);
    }
  }();

  template <class D>
  static constexpr bool fitsInline() {
    return sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<D>;
  }

  template <class D>
  static constexpr orTaskOps kInlineOps = {
      [](void* self, orTaskContext_t context) { runCallable(objectOf<D, false>(self), context); },
      [](void* dst, void* src) {
        ::new (dst) D(std::move(*static_cast<D*>(src)));
        static_cast<D*>(src)->~D();
      },
      [](void* self) { static_cast<D*>(self)->~D(); },
      kAccessesOf<D, false>,
      kNameOf<D, false>,
  };

  template <class D>
  static constexpr orTaskOps kHeapOps = {
      [](void* self, orTaskContext_t context) { runCallable(objectOf<D, true>(self), context); },
      [](void* dst, void* src) { *static_cast<D**>(dst) = *static_cast<D**>(src); },
      [](void* self) { delete *static_cast<D**>(self); },
      kAccessesOf<D, true>,
      kNameOf<D, true>,
  };

  const orTaskOps* ops_ = nullptr;
  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
};

// Enqueues `task` on `stream` (0: the current device's default stream) and returns at once.
// Errors as orLaunchTask; on error the task is destroyed without running; an empty task is
// orErrorInvalidValue. With `wait`, returns once the task has run: orErrorLaunchFailure with the
// task's own failure if it failed (whatever another thread's synchronization has reported
// meanwhile), else the stream's pending failure, if any, as orStreamSynchronize would. Not from
// inside a task (orErrorNotPermitted).
// [marker: task-launch]
inline orError_t launchTask(orStream_t stream, Task&& task, bool wait = false) {
  // On every return but the one for an empty task, the runtime has taken the object over.
  const auto [ops, object] = task.release();
  return orLaunchTask(stream, ops, object, Task::kInlineBytes,
                      wait ? orLaunchTaskWait : orLaunchTaskDefault);
}

template <class F>
orError_t launch(orStream_t stream, F&& fn) {
  return launchTask(stream, Task(std::forward<F>(fn)));
}

// Launches and waits: see launchTask.
template <class F>
orError_t launchAndWait(orStream_t stream, F&& fn) {
  return launchTask(stream, Task(std::forward<F>(fn)), /*wait=*/true);
}

}  // namespace openreg
