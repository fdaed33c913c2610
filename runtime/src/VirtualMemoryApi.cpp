// Entry points of runtime.h's "Virtual memory" section: reserving ranges of a device's address
// space and mapping memory into them, for a caching allocator's expandable segments
// (Note [Reserved address ranges] in DeviceMemory.h).
#include <openreg/runtime.h>

#include <cstdint>
#include <string>

#include "Poison.h"
#include "Runtime.h"

using namespace openreg;

namespace {

constexpr std::size_t kGranularity = DeviceMemory::kGranularity;

// `size` must be a positive multiple of the granularity.
orError_t checkSize(const char* call, std::size_t size) {
  if (size != 0 && size % kGranularity == 0) return orSuccess;
  return fail(orErrorInvalidValue, call,
              "size " + std::to_string(size) + " is not a positive multiple of the granularity (" +
                  std::to_string(kGranularity) + " bytes, orMemGetAllocationGranularity)");
}

// The device whose address space holds `ptr`, an address from orMemAddressReserve aligned to the
// granularity, with a valid `size`; else nullptr, having set the error in *error.
Device* reservedRange(const char* call, const void* ptr, std::size_t size, orError_t* error) {
  *error = checkSize(call, size);
  if (*error != orSuccess) return nullptr;
  Device* d = deviceOfPointer(ptr);
  if (d == nullptr || reinterpret_cast<std::uintptr_t>(ptr) % kGranularity != 0) {
    *error = fail(orErrorInvalidValue, call,
                  "ptr " + hexAddress(ptr) +
                      (d == nullptr ? " is not a device address (orMemAddressReserve gives one)"
                                    : " is not a multiple of the granularity (" +
                                          std::to_string(kGranularity) + " bytes)"));
  }
  return *error == orSuccess ? d : nullptr;
}

// orMemAddressFree, orMemMap and orMemUnmap: checks the arguments, then applies `op` to the
// memory of the device whose address space holds the range.
using RangeOp = orError_t (DeviceMemory::*)(const void*, std::size_t, std::string*);
orError_t onReservedRange(const char* call, void* ptr, std::size_t size, RangeOp op) {
  orError_t e;
  Device* d = reservedRange(call, ptr, size, &e);
  if (d == nullptr) return e;
  std::string message;
  e = (d->memory.*op)(ptr, size, &message);
  if (e != orSuccess) return fail(e, call, message);
  // A new mapping is fresh memory and an unmapped range no one's: poison a failed task left there
  // (while mapped, or written through the window while not) does not carry over (Note [Poisoned
  // memory]), as orFree clears an allocation's.
  if (op != &DeviceMemory::releaseReservation) {
    poisonMap().clear(reinterpret_cast<std::uintptr_t>(ptr), size);
  }
  return orSuccess;
}

}  // namespace

extern "C" {

orError_t orMemGetAllocationGranularity(size_t* granularity) {
  OR_ENTER_CONFIGURED();
  OR_REQUIRE_NOT_NULL(granularity);
  *granularity = kGranularity;
  return orSuccess;
}

orError_t orMemAddressReserve(void** ptr, size_t size) {
  OR_ENTER();
  OR_REQUIRE_NOT_NULL(ptr);
  if (orError_t e = checkSize(__func__, size); e != orSuccess) return e;
  std::string message;
  const orError_t e = device(currentDevice()).memory.reserve(size, ptr, &message);
  return e == orSuccess ? e : fail(e, __func__, message);
}

orError_t orMemAddressFree(void* ptr, size_t size) {
  OR_ENTER();
  return onReservedRange(__func__, ptr, size, &DeviceMemory::releaseReservation);
}

// [marker: mem-map]
orError_t orMemMap(void* ptr, size_t size) {
  OR_ENTER();
  return onReservedRange(__func__, ptr, size, &DeviceMemory::mapRange);
}

orError_t orMemUnmap(void* ptr, size_t size) {
  OR_ENTER();
  return onReservedRange(__func__, ptr, size, &DeviceMemory::unmapRange);
}

}  // extern "C"
