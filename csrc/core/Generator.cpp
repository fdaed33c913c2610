#include "core/Generator.h"

#include <mutex>
#include <vector>

#include "core/Exception.h"
#include "core/Functions.h"
#include "core/GraphImpl.h"

namespace openreg {

// [marker: generator]
GeneratorImpl::GeneratorImpl(c10::DeviceIndex device)
    : at::CPUGeneratorImpl(c10::default_rng_seed_val) {
  device_ = c10::Device(c10::DeviceType::PrivateUse1, device);
  key_set_ = c10::DispatchKeySet(c10::DispatchKey::PrivateUse1);
}

GeneratorImpl::~GeneratorImpl() {
  if (lastUse_ != nullptr) (void)orEventDestroy(lastUse_);
}

// [marker: generator-order]
void GeneratorImpl::waitForPreviousUseOn(orStream_t stream) {
  if (lastUse_ != nullptr && lastStream_ != stream) {
    OPENREG_CHECK(orStreamWaitEvent(stream, lastUse_, 0));
  }
}

void GeneratorImpl::recordUseOn(orStream_t stream) {
  // The event orders the generator's uses, nothing more: a failure of other work queued before
  // this use is its stream's to report, not the generator's, which would raise it at every seeding
  // and carry it to every stream that draws numbers next (issue 24).
  if (lastUse_ == nullptr) {
    OPENREG_CHECK(orEventCreateWithFlags(&lastUse_, orEventDisableTiming | orEventDisableFailure));
  }
  OPENREG_CHECK(orEventRecord(lastUse_, stream));
  lastStream_ = stream;
  // Note [Random numbers in graphs] in GraphImpl.h: a use on a capturing stream belongs to the
  // graph.
  noteGeneratorUse(stream, this);
}

// [marker: generator-task]
void GeneratorImpl::runWithCpuGenerator(const std::function<void(const at::Generator&)>& fn) {
  std::lock_guard<std::mutex> lock(stateMutex_);
  at::Generator cpu = at::make_generator<at::CPUGeneratorImpl>();
  auto* impl = cpu.get<at::CPUGeneratorImpl>();
  impl->set_engine(engine());
  impl->set_next_float_normal_sample(next_float_normal_sample());
  impl->set_next_double_normal_sample(next_double_normal_sample());
  fn(cpu);
  set_engine(impl->engine());
  set_next_float_normal_sample(impl->next_float_normal_sample());
  set_next_double_normal_sample(impl->next_double_normal_sample());
}

void GeneratorImpl::waitForUses() const {
  if (lastUse_ != nullptr) OPENREG_CHECK(orEventSynchronize(lastUse_));
}

void GeneratorImpl::set_current_seed(uint64_t seed) {
  waitForUses();
  at::CPUGeneratorImpl::set_current_seed(seed);
}

uint64_t GeneratorImpl::seed() {
  waitForUses();
  return at::CPUGeneratorImpl::seed();
}

void GeneratorImpl::set_state(const c10::TensorImpl& newState) {
  waitForUses();
  at::CPUGeneratorImpl::set_state(newState);
}

c10::intrusive_ptr<c10::TensorImpl> GeneratorImpl::get_state() const {
  waitForUses();
  return at::CPUGeneratorImpl::get_state();
}

GeneratorImpl* GeneratorImpl::clone_impl() const {
  waitForUses();
  auto* copy = new GeneratorImpl(device_.index());
  copy->at::CPUGeneratorImpl::set_state(*at::CPUGeneratorImpl::get_state());
  return copy;
}

const at::Generator& getDefaultGenerator(c10::DeviceIndex device) {
  // Never destroyed: Python may still use a generator during exit.
  static auto* generators = new std::vector<at::Generator>();
  static std::once_flag created;
  std::call_once(created, [] {
    for (c10::DeviceIndex i = 0; i < device_count(); ++i) {
      generators->push_back(at::make_generator<GeneratorImpl>(i));
    }
  });
  if (device < 0) device = current_device();
  check_device_index(device);
  return (*generators)[device];
}

at::Generator createGenerator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<GeneratorImpl>(device);
}

}  // namespace openreg
