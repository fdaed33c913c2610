// Random-number generators of openreg devices.
//
// An openreg generator is ATen's CPU generator (the same Philox-free MT19937 engine and the same
// normal-distribution cache) labelled with an openreg device. Its state has the CPU generator's
// layout, so for the same seed it produces the same random stream as the CPU: random operators
// that run the CPU kernels on the device memory with this generator give results bitwise equal to
// the CPU's. One default generator per device, seeded like the CPU's default (67280421310721).
#pragma once

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <openreg/runtime.h>

#include <functional>
#include <mutex>

#include "core/Macros.h"

namespace openreg {

// Note [Asynchronous random numbers]
// A random operator runs as a stream task like any other (Note [Generic engine]), so the
// generator's state is consumed on the device, in stream order, not at the call. Program order is
// kept across streams: each use records the generator's event on its stream, and a use on another
// stream first waits for that event (useOn). So the n-th random call in program order always
// consumes the n-th stretch of the random stream, as on the CPU, whatever streams the calls are on.
// The task runs the CPU kernel with a CPU generator holding the device generator's state, and
// writes the advanced state back (runWithCpuGenerator). The host reads or replaces the state only
// after every queued use has run: get_state, set_state, manual seeding and cloning wait for the
// event first. The event only orders (orEventDisableFailure): a failed task queued before a use
// stays its stream's to report, and neither seeding nor a later draw on another stream raises it
// (docs/errors.md, "When the error state ends").
struct OPENREG_TORCH_API GeneratorImpl final : public at::CPUGeneratorImpl {
  explicit GeneratorImpl(c10::DeviceIndex device);
  ~GeneratorImpl() override;

  // Host, under mutex(), around the launch of a task that will use the generator on `stream`:
  // before it, orders the stream after the previous use; after it, records this use.
  void waitForPreviousUseOn(orStream_t stream);
  void recordUseOn(orStream_t stream);
  // Task: runs `fn` with a CPU generator holding this generator's state, then keeps the new state.
  void runWithCpuGenerator(const std::function<void(const at::Generator&)>& fn);
  // Host: blocks until every queued use has run.
  void waitForUses() const;

  // Host access to the state waits for the queued uses.
  void set_current_seed(uint64_t seed) override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& newState) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;

 private:
  GeneratorImpl* clone_impl() const override;

  std::mutex stateMutex_;        // taken by tasks while they hold the state
  orEvent_t lastUse_ = nullptr;  // recorded after the last queued use
  orStream_t lastStream_ = nullptr;
};

// The default generator of `device` (-1: the current device).
OPENREG_TORCH_API const at::Generator& getDefaultGenerator(c10::DeviceIndex device = -1);
OPENREG_TORCH_API at::Generator createGenerator(c10::DeviceIndex device = -1);

}  // namespace openreg
