// openreg::Task and openreg::launch: the C++ form of a kernel launch.
//
// A Task is a move-only, type-erased `void()` callable with inline storage, so launching a small
// lambda (a few pointers and sizes) allocates nothing. Larger callables, or ones whose move may
// throw, are kept on the heap.
//
// A callable that throws does not take the worker down: the exception's message becomes the
// stream's pending error, returned as orErrorLaunchFailure (with the message in
// orGetLastErrorMessage) by the next synchronizing call on that stream or device. Later tasks on
// the stream still run. See Note [Task errors] in runtime/src/Stream.cpp.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <new>
#include <type_traits>
#include <utility>

namespace openreg {

class Task {
 public:
  static constexpr std::size_t kInlineBytes = 64;

  Task() noexcept = default;

  template <class F, class D = std::decay_t<F>,
            class = std::enable_if_t<!std::is_same_v<D, Task> && std::is_invocable_r_v<void, D&>>>
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

  // Runs the callable. Calling an empty Task is a no-op.
  void operator()() {
    if (ops_ != nullptr) ops_->run(storage_);
  }

  void reset() noexcept {
    if (ops_ != nullptr) {
      ops_->destroy(storage_);
      ops_ = nullptr;
    }
  }

 private:
  struct Ops {
    void (*run)(void* self);
    void (*relocate)(void* dst, void* src) noexcept;  // move-construct into dst, destroy src
    void (*destroy)(void* self) noexcept;
  };

  template <class D>
  static constexpr bool fitsInline() {
    return sizeof(D) <= kInlineBytes && alignof(D) <= alignof(std::max_align_t) &&
           std::is_nothrow_move_constructible_v<D>;
  }

  template <class D>
  static constexpr Ops kInlineOps = {
      [](void* self) { (*static_cast<D*>(self))(); },
      [](void* dst, void* src) noexcept {
        ::new (dst) D(std::move(*static_cast<D*>(src)));
        static_cast<D*>(src)->~D();
      },
      [](void* self) noexcept { static_cast<D*>(self)->~D(); },
  };

  template <class D>
  static constexpr Ops kHeapOps = {
      [](void* self) { (**static_cast<D**>(self))(); },
      [](void* dst, void* src) noexcept { *static_cast<D**>(dst) = *static_cast<D**>(src); },
      [](void* self) noexcept { delete *static_cast<D**>(self); },
  };

  const Ops* ops_ = nullptr;
  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
};

// Enqueues `task` on `stream` (0: the current device's default stream) and returns at once.
// Errors as orLaunchHostFunc; on error the task is destroyed without running.
OPENREG_RUNTIME_API orError_t launchTask(orStream_t stream, Task&& task);

template <class F>
orError_t launch(orStream_t stream, F&& fn) {
  return launchTask(stream, Task(std::forward<F>(fn)));
}

}  // namespace openreg
