// WorkOccl: one collective of the occl backend, from its launch on the host to its completion on
// the group's communication thread.
//
// [marker: occl-work]
// Note [Collective ordering]
// A collective reads and writes device memory through kernel-window aliases (KernelAlias.h), and
// Gloo runs it on its own threads, outside every stream. The order the stream would give it is
// restored at both ends:
//  - Start: the launch records an event on the current stream of the tensors' device (the gate).
//    The operation is handed to Gloo only once the gate is reached, so the collective starts
//    after the work that produced its inputs: at once by the issuing thread if it already is and
//    nothing is queued, else by the communication thread, which waits for it (Note [occl launch
//    and completion] in ProcessGroupOccl.h). The launch itself never waits.
//  - End: the launch also arms a host-completed event (Note [Host-completed records] in
//    runtime/src/Event.h) that complete() completes, with the collective's error if it failed.
//    wait() and synchronize() make the caller's current stream wait for it and return at once,
//    as NCCL's do: work launched afterwards on that stream runs after the collective, and a
//    failed collective's error becomes that stream's pending failure (reported, naming the
//    collective, by its next synchronizing call: docs/errors.md). The waiting stream parks
//    without holding a device worker, so a later collective's gate on another stream of the same
//    device still runs, whatever the number of workers. wait() raises at once only if the
//    collective has already failed; wait(timeout) also blocks the host up to `timeout` (NCCL
//    blocks the host when given a timeout). The future (getFuture) completes with the output
//    tensors once Gloo is done, and its wait() blocks the host until then: completion is the
//    only moment it can be marked (it records no event either: Gloo wrote the outputs from the
//    host, and the event above carries the order). CPU tensors have no stream: wait() blocks the
//    host until Gloo is done, as Gloo's does.
// While a profiler records, the collective is an entry "occl <op>" on that stream's row, from its
// hand-over to Gloo to its completion, linked to the launching operator (HostActivity).
// Without a wait() the caller must not touch the outputs, as with NCCL and async_op=True.
//
// The Work keeps every tensor of the call alive until Gloo is done, and completes its future
// exactly once, from one place (WorkOccl::complete): Gloo's own Work may have no future at all
// (reduce_scatter_tensor's), and completing from two places races.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Event.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <openreg/runtime.h>
#include <openreg/activity.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace openreg::distributed {

class WorkOccl : public c10d::Work {
 public:
  // Hands the operation to Gloo and returns Gloo's Work, at once (on the communication thread).
  // nullptr: nothing to wait for.
  using Launch = std::function<c10::intrusive_ptr<c10d::Work>()>;
  // Runs once Gloo's Work is done, before completion, where completion runs (Gloo's future
  // callback, or the completion thread): AVG's division.
  using After = std::function<void()>;

  // `device`: the openreg device of the tensors, or nullopt for CPU tensors (no gate, a CPU
  // future). `tensors`: every tensor of the call, kept alive until done. `outputs`: the future's
  // value and result().
  WorkOccl(int rank, c10d::OpType opType, std::string opName, std::optional<c10::Device> device,
           std::vector<at::Tensor> tensors, std::vector<at::Tensor> outputs, Launch launch,
           After after = nullptr);
  ~WorkOccl() override;

  // Records the gate on the current stream of the device. Called once, by the launching thread.
  void recordGate();
  // True once the inputs are ready (the gate has been reached), without waiting.
  bool gateReached() const noexcept;
  // Waits for the gate and hands the operation to Gloo; the failure, restated, if that failed.
  // Completes nothing. Called once, by whichever thread launches (see ProcessGroupOccl.h).
  std::exception_ptr launch() noexcept;
  // Completes with `error` (from launch()).
  void failWith(std::exception_ptr error) noexcept;
  // Arranges completion on Gloo's future: false if Gloo's Work has none (or there is no Gloo
  // Work), and the completion thread must call completeAfterGloo().
  bool completeOnGlooFuture() noexcept;
  // Waits for Gloo's Work, runs After and completes.
  void completeAfterGloo() noexcept;

  bool wait(std::chrono::milliseconds timeout) override;
  // Blocks the calling host thread until done, raising the failure: the host-side wait, for
  // internal use (endCoalescing's combined Work) and CPU tensors.
  bool blockUntilDone(std::chrono::milliseconds timeout);
  void synchronize() override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

  const std::string& opName() const { return opName_; }
  const std::optional<c10::Device>& device() const { return device_; }

 private:
  void complete(std::exception_ptr error) noexcept;
  // Makes the current stream of the device wait for done_ (devices only).
  void orderCurrentStream();
  // Runs After and completes, or fails with Gloo's error.
  void finishAfterGloo(std::exception_ptr glooError) noexcept;

  const std::string opName_;
  const std::optional<c10::Device> device_;
  std::vector<at::Tensor> tensors_;
  const std::vector<at::Tensor> outputs_;
  Launch launch_;
  After after_;
  c10::intrusive_ptr<c10d::Work> glooWork_;
  std::optional<c10::Event> gate_;
  // Armed by recordGate, completed by complete(): what wait() makes the current stream wait for.
  orEvent_t done_ = nullptr;
  // The profiler's row entry on the same stream, from the hand-over to Gloo to completion (Note
  // [Host-timed activity] in openreg/activity.hpp). Inactive when no recording is on.
  HostActivity activity_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace openreg::distributed
