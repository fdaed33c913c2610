#include "distributed/ProcessGroupOccl.h"

#include <ATen/ops/div.h>
#include <c10/core/InferenceMode.h>
#include <c10/util/Exception.h>
#include <openreg/runtime.h>

#include <algorithm>
#include <functional>
#include <utility>

#include "aten/KernelAlias.h"

namespace openreg::distributed {

namespace {

// One call of a collective. Its name, given once, names it in the Work, in every message and in
// the profiler. It checks that the call's tensors share one device, makes the aliases Gloo is
// given, turns the reduce op into one Gloo has, and makes the Work.
// [marker: occl-call-tensors]
class Collective {
 public:
  Collective(int rank, c10d::OpType type, const char* name)
      : rank_(rank), type_(type), name_(name) {}

  at::Tensor alias(const at::Tensor& t) {
    if (!t.defined()) return t;
    check(t.device());
    originals_.push_back(t);
    if (t.is_cpu()) return t;
    // A normal tensor even under torch.inference_mode(): Gloo writes the alias in place on its
    // own threads, where inference mode is off and an inference tensor refuses in-place updates.
    c10::InferenceMode normal(false);
    return kernelAlias(t);
  }
  std::vector<at::Tensor> alias(const std::vector<at::Tensor>& ts) {
    std::vector<at::Tensor> out;
    out.reserve(ts.size());
    for (const auto& t : ts) out.push_back(alias(t));
    return out;
  }
  std::vector<std::vector<at::Tensor>> alias(const std::vector<std::vector<at::Tensor>>& tss) {
    std::vector<std::vector<at::Tensor>> out;
    out.reserve(tss.size());
    for (const auto& ts : tss) out.push_back(alias(ts));
    return out;
  }

  // A reducing collective's options as Gloo is given them (see glooReduceOp).
  template <class Options>
  Options glooOptions(const Options& opts);
  // After glooOptions: AVG's division of `aliases`, or nothing for the other reduce ops.
  WorkOccl::After averageAfter(std::vector<at::Tensor> aliases, int64_t groupSize) const;

  // The Work, keeping every tensor aliased so far; `outputs` is its future's value.
  c10::intrusive_ptr<WorkOccl> work(std::vector<at::Tensor> outputs, WorkOccl::Launch launch,
                                    WorkOccl::After after = nullptr) {
    return c10::make_intrusive<WorkOccl>(rank_, type_, name_, device(), std::move(originals_),
                                         std::move(outputs), std::move(launch), std::move(after));
  }

 private:
  // The openreg device of the call, or nullopt for CPU tensors (or none).
  std::optional<c10::Device> device() const {
    if (device_.has_value() && device_->is_privateuseone()) return device_;
    return std::nullopt;
  }

  void check(c10::Device device) {
    TORCH_CHECK(device.is_privateuseone() || device.is_cpu(), "occl ", name_, ": a tensor is on ",
                device.str(),
                "; the occl backend serves openreg tensors (and a group's cpu tensors). Move it "
                "with .to(\"" OR_DEVICE_NAME "\").");
    if (!device_.has_value()) {
      device_ = device;
      return;
    }
    TORCH_CHECK(*device_ == device, "occl ", name_, ": a tensor is on ", device.str(),
                " but an earlier tensor of the same call is on ", device_->str(),
                ". One collective's tensors must all be on one device: move them with .to(\"",
                device_->str(), "\").");
  }

  const int rank_;
  const c10d::OpType type_;
  const char* const name_;
  bool average_ = false;
  std::optional<c10::Device> device_;
  std::vector<at::Tensor> originals_;
};

bool isAvg(const c10d::ReduceOp& op) {
  return op.op_ == c10d::ReduceOp::AVG;
}

// Gloo has no AVG: occl sums and divides by the group size, as NCCL's average does (integers
// truncate). PREMUL_SUM is NCCL's own and is refused here, naming what to use.
c10d::ReduceOp glooReduceOp(const char* op, const c10d::ReduceOp& reduceOp) {
  TORCH_CHECK(reduceOp.op_ != c10d::ReduceOp::PREMUL_SUM, "occl ", op,
              ": ReduceOp.PREMUL_SUM is not supported (Gloo has no pre-multiplied sum); scale the "
              "inputs and use ReduceOp.SUM.");
  if (isAvg(reduceOp)) return c10d::ReduceOp(c10d::ReduceOp::SUM);
  return reduceOp;
}

// Runs after Gloo's sum, where completion runs (in Gloo's future callback, or on the completion
// thread for an operation whose Gloo Work has no future), with the CPU's division kernel.
WorkOccl::After divideAfter(std::vector<at::Tensor> aliases, int64_t n) {
  return [aliases = std::move(aliases), n]() mutable {
    for (auto& t : aliases) {
      if (at::isIntegralType(t.scalar_type(), /*includeBool=*/true)) {
        t.div_(n, "trunc");
      } else {
        t.div_(n);
      }
    }
  };
}

// The tensors of per-rank output lists, in order: what a gathering Work's future completes with.
std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& lists) {
  std::vector<at::Tensor> flat;
  for (const auto& list : lists) flat.insert(flat.end(), list.begin(), list.end());
  return flat;
}

template <class Options>
Options Collective::glooOptions(const Options& opts) {
  Options glooOpts = opts;
  glooOpts.reduceOp = glooReduceOp(name_, opts.reduceOp);
  average_ = isAvg(opts.reduceOp);
  return glooOpts;
}

WorkOccl::After Collective::averageAfter(std::vector<at::Tensor> aliases, int64_t groupSize) const {
  return average_ ? divideAfter(std::move(aliases), groupSize) : nullptr;
}

// Hands the operation to Gloo when the Work is launched: Gloo's `method` on copies of `args`.
template <class Method, class... Args>
WorkOccl::Launch onGloo(c10::intrusive_ptr<c10d::Backend> gloo, Method method, Args... args) {
  return [gloo = std::move(gloo), method, ... args = std::move(args)]() mutable {
    return std::invoke(method, *gloo, args...);
  };
}

}  // namespace

ProcessGroupOccl::ProcessGroupOccl(c10::intrusive_ptr<c10d::Backend> gloo, GlooMaker makeGloo,
                                   WithoutGil withoutGil)
    : c10d::Backend(gloo->getRank(), gloo->getSize()),
      gloo_(std::move(gloo)),
      makeGloo_(std::move(makeGloo)),
      withoutGil_(std::move(withoutGil)) {
  commThread_ = std::thread([this] { commLoop(); });
  completionThread_ = std::thread([this] { completionLoop(); });
}

// [marker: occl-destroyed-without-gil]
// Note [Destroyed without the GIL]
// Everything queued still runs (and completes its Work) before the threads end, and the Gloo
// backend goes with this one, joining Gloo's threads. The last reference to a WorkOccl can be
// dropped on any of those threads (Gloo's drops the callback that completes it), and a WorkOccl
// keeps the caller's tensors, whose Python objects need the GIL to let go of. The destructor
// runs where the group's last reference went, usually on the Python thread, holding the GIL
// (destroy_process_group): it must wait for those threads without it, or a group destroyed right
// after a collective deadlocks.
ProcessGroupOccl::~ProcessGroupOccl() {
  auto finish = [this] {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    launchPending_.notify_all();
    if (commThread_.joinable()) commThread_.join();
    if (completionThread_.joinable()) completionThread_.join();
    gloo_.reset();
  };
  if (withoutGil_) {
    withoutGil_(finish);
  } else {
    finish();
  }
}

// [marker: occl-comm-loop]
void ProcessGroupOccl::commLoop() {
  for (;;) {
    c10::intrusive_ptr<WorkOccl> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      launchPending_.wait(lock, [&] { return stopping_ || !launchQueue_.empty(); });
      if (launchQueue_.empty()) {
        launchDone_ = true;
        completionPending_.notify_all();
        return;
      }
      work = std::move(launchQueue_.front());
      launchQueue_.pop_front();
      launching_ = true;
    }
    std::exception_ptr error = work->launch();  // waits for the gate
    {
      std::lock_guard<std::mutex> lock(mutex_);
      launching_ = false;
    }
    if (error) {
      work->failWith(std::move(error));
    } else {
      awaitGloo(work);
    }
  }
}

void ProcessGroupOccl::awaitGloo(const c10::intrusive_ptr<WorkOccl>& work) {
  if (work->completeOnGlooFuture()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    completionQueue_.push_back(work);
  }
  completionPending_.notify_one();
}

void ProcessGroupOccl::completionLoop() {
  for (;;) {
    c10::intrusive_ptr<WorkOccl> work;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      completionPending_.wait(lock, [&] { return launchDone_ || !completionQueue_.empty(); });
      if (completionQueue_.empty()) return;
      work = std::move(completionQueue_.front());
      completionQueue_.pop_front();
    }
    work->completeAfterGloo();
  }
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::enqueue(c10::intrusive_ptr<WorkOccl> work) {
  work->recordGate();
  if (coalescing_) coalesced_.push_back(work);
  bool launchedHere = false;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    TORCH_CHECK(!stopping_, "occl ", work->opName(), ": the process group is shutting down");
    if (launchQueue_.empty() && !launching_ && work->gateReached()) {
      // Nothing is ahead of it: Gloo gets it in issue order from this thread, under the lock so
      // that no later operation overtakes it. The gate is reached, so this does not wait.
      launchedHere = true;
      error = work->launch();
    } else {
      launchQueue_.push_back(work);
    }
  }
  if (!launchedHere) {
    launchPending_.notify_one();
  } else if (error) {
    work->failWith(std::move(error));
  } else {
    awaitGloo(work);
  }
  return work;
}

void ProcessGroupOccl::startCoalescing() {
  TORCH_CHECK(!coalescing_, "occl: startCoalescing called twice without endCoalescing");
  coalescing_ = true;
  coalesced_.clear();
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::endCoalescing() {
  TORCH_CHECK(coalescing_, "occl: endCoalescing called without startCoalescing");
  coalescing_ = false;
  std::optional<c10::Device> device;
  std::vector<at::Tensor> outputs;
  for (const auto& work : coalesced_) {
    if (!device.has_value()) device = work->device();
    for (const auto& t : work->result()) outputs.push_back(t);
  }
  // Runs on the completion thread (it has no Gloo Work): waits for each coalesced operation and
  // raises the first failure.
  return enqueue(c10::make_intrusive<WorkOccl>(
      rank_, c10d::OpType::COALESCED, "coalesced operations", device, std::vector<at::Tensor>{},
      std::move(outputs), [] { return c10::intrusive_ptr<c10d::Work>(); },
      [works = std::move(coalesced_)] {
        for (const auto& w : works) w->blockUntilDone(::kNoTimeout);
      }));
}

// The timeout is all a split reads (see split()).
c10::intrusive_ptr<c10d::Backend::Options> ProcessGroupOccl::getBackendOptions() {
  return c10::make_intrusive<Options>(getBackendName(), gloo_->getBackendOptions()->timeout);
}

// A split is a new Gloo group over the store ProcessGroup::splitGroup prepared, made by the
// members of `ranks` only (the others get no backend).
c10::intrusive_ptr<c10d::Backend> ProcessGroupOccl::split(
    const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
    const c10::intrusive_ptr<Options>& opts) {
  TORCH_CHECK(makeGloo_, "occl: this backend was made without a way to split it");
  const auto it = std::find(ranks.begin(), ranks.end(), rank_);
  if (it == ranks.end()) return nullptr;
  const int groupRank = static_cast<int>(it - ranks.begin());
  const auto timeout = opts ? opts->timeout : getBackendOptions()->timeout;
  auto gloo = makeGloo_(store, groupRank, static_cast<int>(ranks.size()), timeout);
  return c10::make_intrusive<ProcessGroupOccl>(std::move(gloo), makeGloo_, withoutGil_);
}

void ProcessGroupOccl::setGroupUid(const std::string& pgUid) {
  c10d::Backend::setGroupUid(pgUid);
  gloo_->setGroupUid(pgUid);
}

void ProcessGroupOccl::setSequenceNumberForGroup() {
  gloo_->setSequenceNumberForGroup();
}

uint64_t ProcessGroupOccl::getSequenceNumberForGroup() {
  return gloo_->getSequenceNumberForGroup();
}

void ProcessGroupOccl::setTimeout(std::chrono::milliseconds timeout) {
  gloo_->setTimeout(timeout);
}

// [marker: occl-collectives]
// Every collective is written the same way: a Collective named once, the aliases of its tensors,
// Gloo's method on them, and for the reducing ones AVG's division after it.
using Gloo = c10d::Backend;

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::broadcast(std::vector<at::Tensor>& tensors,
                                                           const c10d::BroadcastOptions& opts) {
  Collective call(rank_, c10d::OpType::BROADCAST, "broadcast");
  auto aliases = call.alias(tensors);
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::broadcast, aliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::allreduce(std::vector<at::Tensor>& tensors,
                                                           const c10d::AllreduceOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLREDUCE, "all_reduce");
  auto aliases = call.alias(tensors);
  const auto glooOpts = call.glooOptions(opts);
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::allreduce, aliases, glooOpts),
                           call.averageAfter(aliases, size_)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLREDUCE_COALESCED, "all_reduce_coalesced");
  auto aliases = call.alias(tensors);
  const auto glooOpts = call.glooOptions(opts);
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::allreduce_coalesced, aliases, glooOpts),
                           call.averageAfter(aliases, size_)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::reduce(std::vector<at::Tensor>& tensors,
                                                        const c10d::ReduceOptions& opts) {
  Collective call(rank_, c10d::OpType::REDUCE, "reduce");
  auto aliases = call.alias(tensors);
  const auto glooOpts = call.glooOptions(opts);
  // Only the root holds the sum to divide.
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::reduce, aliases, glooOpts),
                           opts.rootRank == rank_ ? call.averageAfter(aliases, size_) : nullptr));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLGATHER, "all_gather");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  return enqueue(
      call.work(flatten(outputs), onGloo(gloo_, &Gloo::allgather, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::_allgather_base(
    at::Tensor& output, at::Tensor& input, const c10d::AllgatherOptions& opts) {
  Collective call(rank_, c10d::OpType::_ALLGATHER_BASE, "all_gather_into_tensor");
  auto outAlias = call.alias(output);
  auto inAlias = call.alias(input);
  return enqueue(
      call.work({output}, onGloo(gloo_, &Gloo::_allgather_base, outAlias, inAlias, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLGATHER_COALESCED, "all_gather_coalesced");
  auto outAliases = call.alias(outputLists);
  auto inAliases = call.alias(inputs);
  return enqueue(call.work(flatten(outputLists),
                           onGloo(gloo_, &Gloo::allgather_coalesced, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  Collective call(rank_, c10d::OpType::COALESCED, "all_gather_into_tensor_coalesced");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  return enqueue(call.work(
      outputs, onGloo(gloo_, &Gloo::allgather_into_tensor_coalesced, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::GatherOptions& opts) {
  Collective call(rank_, c10d::OpType::GATHER, "gather");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  return enqueue(
      call.work(flatten(outputs), onGloo(gloo_, &Gloo::gather, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ScatterOptions& opts) {
  Collective call(rank_, c10d::OpType::SCATTER, "scatter");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  return enqueue(call.work(outputs, onGloo(gloo_, &Gloo::scatter, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Collective call(rank_, c10d::OpType::REDUCE_SCATTER, "reduce_scatter");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  const auto glooOpts = call.glooOptions(opts);
  return enqueue(call.work(outputs,
                           onGloo(gloo_, &Gloo::reduce_scatter, outAliases, inAliases, glooOpts),
                           call.averageAfter(outAliases, size_)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) {
  Collective call(rank_, c10d::OpType::_REDUCE_SCATTER_BASE, "reduce_scatter_tensor");
  auto outAlias = call.alias(output);
  auto inAlias = call.alias(input);
  const auto glooOpts = call.glooOptions(opts);
  return enqueue(call.work({output},
                           onGloo(gloo_, &Gloo::_reduce_scatter_base, outAlias, inAlias, glooOpts),
                           call.averageAfter({outAlias}, size_)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  Collective call(rank_, c10d::OpType::COALESCED, "reduce_scatter_tensor_coalesced");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  const auto glooOpts = call.glooOptions(opts);
  return enqueue(call.work(
      outputs,
      onGloo(gloo_, &Gloo::reduce_scatter_tensor_coalesced, outAliases, inAliases, glooOpts),
      call.averageAfter(outAliases, size_)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLTOALL_BASE, "all_to_all_single");
  auto outAlias = call.alias(output);
  auto inAlias = call.alias(input);
  return enqueue(call.work({output}, onGloo(gloo_, &Gloo::alltoall_base, outAlias, inAlias,
                                            outputSplitSizes, inputSplitSizes, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::alltoall(std::vector<at::Tensor>& outputs,
                                                          std::vector<at::Tensor>& inputs,
                                                          const c10d::AllToAllOptions& opts) {
  Collective call(rank_, c10d::OpType::ALLTOALL, "all_to_all");
  auto outAliases = call.alias(outputs);
  auto inAliases = call.alias(inputs);
  return enqueue(call.work(outputs, onGloo(gloo_, &Gloo::alltoall, outAliases, inAliases, opts)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::send(std::vector<at::Tensor>& tensors, int dstRank,
                                                      int tag) {
  Collective call(rank_, c10d::OpType::SEND, "send");
  auto aliases = call.alias(tensors);
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::send, aliases, dstRank, tag)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::recv(std::vector<at::Tensor>& tensors, int srcRank,
                                                      int tag) {
  Collective call(rank_, c10d::OpType::RECV, "recv");
  auto aliases = call.alias(tensors);
  return enqueue(call.work(tensors, onGloo(gloo_, &Gloo::recv, aliases, srcRank, tag)));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupOccl::barrier(const c10d::BarrierOptions& opts) {
  Collective call(rank_, c10d::OpType::BARRIER, "barrier");
  return enqueue(call.work({}, onGloo(gloo_, &Gloo::barrier, opts)));
}

}  // namespace openreg::distributed
