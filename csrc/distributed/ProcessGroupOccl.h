// ProcessGroupOccl: the c10d backend of openreg devices ("occl"), a ProcessGroupGloo run on device
// memory.
//
// [marker: occl-backend]
// Note [occl is Gloo on the kernel window]
// Device memory is host-addressable through the kernel window (orGetKernelPointer), so Gloo, a
// CPU backend with a proven TCP transport, can reduce and move it where it lies: each collective
// hands Gloo CPU tensors that alias the device tensors' memory (kernelAlias), and no byte is
// copied on the way. The Gloo backend is made in Python (torch_openreg/distributed.py) and passed
// in, so this file needs c10d's Backend and Work headers only, never Gloo's.
//
// Every operation, a CPU tensor's and barrier included, is handed to Gloo in issue order (Note
// [occl launch and completion] below): Gloo numbers operations in the order they are handed to
// it, so every rank must hand them over in the order the program issued them, and a collective
// may have to wait for its inputs first (Note [Collective ordering] in WorkOccl.h). One call's
// tensors are on one device: all on the same openreg device, or all on the CPU (the backend also
// serves a group's CPU tensors when it is registered for "cpu").
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "core/Macros.h"
#include "distributed/WorkOccl.h"

namespace openreg::distributed {

class OPENREG_TORCH_API ProcessGroupOccl : public c10d::Backend {
 public:
  // Makes the Gloo backend of a group split from this one: (store, rank in the new group, its
  // size, timeout). Gloo's own split needs Gloo's options type, which only Gloo's headers declare.
  using GlooMaker = std::function<c10::intrusive_ptr<c10d::Backend>(
      const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds)>;

  // Runs a wait without the GIL when the calling thread holds it (Note [Destroyed without the
  // GIL]); this library has no Python, so the Python layer supplies it.
  using WithoutGil = std::function<void(const std::function<void()>&)>;

  ProcessGroupOccl(c10::intrusive_ptr<c10d::Backend> gloo, GlooMaker makeGloo,
                   WithoutGil withoutGil);
  ~ProcessGroupOccl() override;

  const std::string getBackendName() const override { return "occl"; }
  c10::intrusive_ptr<Options> getBackendOptions() override;
  bool supportsSplitting() const override { return true; }
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override;
  void setGroupUid(const std::string& pgUid) override;
  void setSequenceNumberForGroup() override;
  uint64_t getSequenceNumberForGroup() override;
  void setTimeout(std::chrono::milliseconds timeout) override;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputSplitSizes,
                                               std::vector<int64_t>& inputSplitSizes,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;

  // Coalescing (torch.distributed._coalescing_manager, batch_isend_irecv): the operations run as
  // they are issued; endCoalescing's Work completes when all of them have.
  bool supportsCoalescing() const override { return true; }
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

 private:
  // Queues `work` for the communication thread, after recording its gate.
  c10::intrusive_ptr<c10d::Work> enqueue(c10::intrusive_ptr<WorkOccl> work);
  void commLoop();
  void completionLoop();
  // After a launch: completion on Gloo's future, else on the completion thread.
  void awaitGloo(const c10::intrusive_ptr<WorkOccl>& work);

  c10::intrusive_ptr<c10d::Backend> gloo_;
  GlooMaker makeGloo_;
  WithoutGil withoutGil_;
  // Note [occl launch and completion]
  // Launches happen in issue order: on the issuing thread itself when nothing is queued or being
  // launched and the inputs are ready (no thread hand-off: small collectives cost what Gloo's do),
  // else on the communication thread, which waits for each gate in turn. A launch never waits for
  // an earlier operation to finish (a send finishes only when the peer posts its receive, which
  // the peer may issue after its own send). Completion runs on Gloo's future callback, or, for
  // operations whose Gloo Work has no future, on the completion thread, in issue order.
  std::mutex mutex_;
  std::condition_variable launchPending_;
  std::condition_variable completionPending_;
  std::deque<c10::intrusive_ptr<WorkOccl>> launchQueue_;
  std::deque<c10::intrusive_ptr<WorkOccl>> completionQueue_;
  bool stopping_ = false;
  bool launchDone_ = false;
  bool launching_ = false;  // the communication thread is launching one
  std::thread commThread_;
  std::thread completionThread_;
  // Between startCoalescing and endCoalescing (the issuing thread only).
  bool coalescing_ = false;
  std::vector<c10::intrusive_ptr<WorkOccl>> coalesced_;
};

}  // namespace openreg::distributed
