// openreg::Task and openreg::launch: the C++ form of a kernel launch.
//
// A Task is a move-only, type-erased `void()` callable with inline storage, so launching a small
// lambda (a few pointers and sizes) allocates nothing. Larger callables, or ones whose move may
// throw, are kept on the heap.
//
// A callable that throws does not take the worker down. Its failure is kept on the stream (the
// next synchronizing call returns it as orErrorLaunchFailure) and, when the callable declares the
// memory it touches, it poisons what it writes: every later task or copy that reads those bytes
// fails with the same error instead of running. See Note [Task errors] in
// runtime/src/Stream.cpp and Note [Poisoned memory] in runtime/src/Poison.h.
#pragma once

#include <openreg/runtime.h>

#include <cstddef>
#include <new>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace openreg {

// One range of device memory a task touches. `ptr` is a device address or its kernel-window
// alias (orGetKernelPointer); ranges outside every device are ignored.
struct MemoryAccess {
  const void* ptr = nullptr;
  std::size_t bytes = 0;
  bool read = false;
  // Written. A write that stores every byte of the range (a dense output, not a strided view
  // with gaps) is a `cover`: its success makes the range valid data again.
  bool write = false;
  bool cover = false;
};

// What a task declares it touches; see Note [Poisoned memory]. Asked for only when some memory is
// poisoned or the task failed, so declaring costs nothing on the fast path.
using AccessList = std::vector<MemoryAccess>;

// A task may throw this to give its failure a category (an integer the runtime carries but does not
// interpret; the PyTorch layer maps it to an exception type). Any other exception has category 0.
class TaskError : public std::runtime_error {
 public:
  TaskError(int category, const std::string& what)
      : std::runtime_error(what), category_(category) {}
  int category() const noexcept { return category_; }

 private:
  int category_;
};

// The category of the failure orGetLastErrorMessage describes (0: none, or not a task's).
OPENREG_RUNTIME_API int lastErrorCategory() noexcept;

// For work that reads device memory on the host thread after synchronizing (a synchronous
// fallback): orErrorLaunchFailure with the failure that poisoned any byte read, else orSuccess.
// Covering writes are then taken as done: the caller writes them before it next synchronizes.
OPENREG_RUNTIME_API orError_t checkHostAccesses(const AccessList& accesses);

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

  // Whether the callable declares its memory accesses: a member
  // `void accesses(openreg::AccessList&) const`.
  bool declaresAccesses() const noexcept { return ops_ != nullptr && ops_->accesses != nullptr; }
  void accesses(AccessList& out) const {
    if (declaresAccesses()) ops_->accesses(storage_, out);
  }
  // What the callable calls itself (a member `const char* name() const`, e.g. the operator it
  // runs), or nullptr. Used to describe captured graphs (orGraphDebugDotPrint).
  const char* name() const {
    return ops_ != nullptr && ops_->name != nullptr ? ops_->name(storage_) : nullptr;
  }

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
    void (*accesses)(const void* self, AccessList& out);  // nullptr: not declared
    const char* (*name)(const void* self);                // nullptr: not declared
  };

  template <class D, class = void>
  struct HasAccesses : std::false_type {};
  template <class D>
  struct HasAccesses<
      D, std::void_t<decltype(std::declval<const D&>().accesses(std::declval<AccessList&>()))>>
      : std::true_type {};

  template <class D>
  static constexpr auto kAccessesOf = [] {
    if constexpr (HasAccesses<D>::value) {
      return +[](const void* self, AccessList& out) { static_cast<const D*>(self)->accesses(out); };
    } else {
      return static_cast<void (*)(const void*, AccessList&)>(nullptr);
    }
  }();
  template <class D>
  static constexpr auto kHeapAccessesOf = [] {
    if constexpr (HasAccesses<D>::value) {
      return +[](const void* self, AccessList& out) {
        (*static_cast<const D* const*>(self))->accesses(out);
      };
    } else {
      return static_cast<void (*)(const void*, AccessList&)>(nullptr);
    }
  }();

  template <class D, class = void>
  struct HasName : std::false_type {};
  template <class D>
  struct HasName<D, std::void_t<decltype(std::declval<const D&>().name())>> : std::true_type {};

  template <class D>
  static constexpr auto kNameOf = [] {
    if constexpr (HasName<D>::value) {
      return +[](const void* self) -> const char* { return static_cast<const D*>(self)->name(); };
    } else {
      return static_cast<const char* (*)(const void*)>(nullptr);
    }
  }();
  template <class D>
  static constexpr auto kHeapNameOf = [] {
    if constexpr (HasName<D>::value) {
      return +[](const void* self) -> const char* {
        return (*static_cast<const D* const*>(self))->name();
      };
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
  static constexpr Ops kInlineOps = {
      [](void* self) { (*static_cast<D*>(self))(); },
      [](void* dst, void* src) noexcept {
        ::new (dst) D(std::move(*static_cast<D*>(src)));
        static_cast<D*>(src)->~D();
      },
      [](void* self) noexcept { static_cast<D*>(self)->~D(); },
      kAccessesOf<D>,
      kNameOf<D>,
  };

  template <class D>
  static constexpr Ops kHeapOps = {
      [](void* self) { (**static_cast<D**>(self))(); },
      [](void* dst, void* src) noexcept { *static_cast<D**>(dst) = *static_cast<D**>(src); },
      [](void* self) noexcept { delete *static_cast<D**>(self); },
      kHeapAccessesOf<D>,
      kHeapNameOf<D>,
  };

  const Ops* ops_ = nullptr;
  alignas(std::max_align_t) unsigned char storage_[kInlineBytes];
};

// Enqueues `task` on `stream` (0: the current device's default stream) and returns at once.
// Errors as orLaunchHostFunc; on error the task is destroyed without running.
// With `wait`, returns once the task has run: orErrorLaunchFailure with the task's own failure
// if it failed (whatever another thread's synchronization has reported meanwhile), else the
// stream's pending failure, if any, as orStreamSynchronize would. Not from inside a task
// (orErrorNotPermitted).
// [marker: task-launch]
OPENREG_RUNTIME_API orError_t launchTask(orStream_t stream, Task&& task, bool wait = false);

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
