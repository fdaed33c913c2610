#include "aten/engine/ShapeCache.h"

#include <c10/core/DefaultDtype.h>

#include <bit>
#include <cstring>
#include <string_view>

namespace openreg::engine {
namespace {

// A tag before each argument's words keeps differently typed arguments apart.
enum Tag : int64_t {
  kNone = 1,
  kTensor,
  kUndefinedTensor,
  kInt,
  kDouble,
  kBool,
  kComplex,
  kString,
  kList,
  kDevice,
  kTuple,
  kGenerator,
};

}  // namespace

void Signature::push(int64_t word) {
  words_.push_back(word);
  // 64-bit mix (splitmix64's finalizer) folded into the running hash.
  uint64_t z = static_cast<uint64_t>(word) + 0x9e3779b97f4a7c15ULL + (hash_ << 6) + (hash_ >> 2);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  hash_ ^= static_cast<size_t>(z ^ (z >> 31));
}

void Signature::addTensor(const at::Tensor& t) {
  if (!t.defined()) {
    push(kUndefinedTensor);
    return;
  }
  push(kTensor);
  push(static_cast<int64_t>(t.device().type()));
  push(static_cast<int64_t>(t.scalar_type()));
  push(static_cast<int64_t>(t.layout()));
  // A wrapped number (the 1.0 of `t + 1.0`) promotes as a Python scalar, a 0-dim tensor of the
  // same dtype as a tensor: int64 + 1.0 is float32, int64 + tensor(0., float64) is float64.
  push((t.is_conj() ? 1 : 0) | (t.is_neg() ? 2 : 0) |
       (t.unsafeGetTensorImpl()->is_wrapped_number() ? 4 : 0));
  push(t.dim());
  for (int64_t size : t.sizes()) push(size);
  for (int64_t stride : t.strides()) push(stride);
  push(t.storage_offset());
}

bool Signature::add(const c10::IValue& value, bool kindOnly) {
  if (value.isTensor()) {
    addTensor(value.toTensor());
  } else if (value.isNone()) {
    push(kNone);
  } else if (value.isInt()) {
    push(kInt);
    if (!kindOnly) push(value.toInt());
  } else if (value.isSymInt()) {
    const auto concrete = value.toSymInt().maybe_as_int();
    if (!concrete) return false;
    push(kInt);
    if (!kindOnly) push(*concrete);
  } else if (value.isDouble()) {
    push(kDouble);
    if (!kindOnly) push(std::bit_cast<int64_t>(value.toDouble()));
  } else if (value.isBool()) {
    push(kBool);
    if (!kindOnly) push(value.toBool());
  } else if (value.isComplexDouble()) {
    push(kComplex);
    if (kindOnly) return true;
    const auto z = value.toComplexDouble();
    push(std::bit_cast<int64_t>(z.real()));
    push(std::bit_cast<int64_t>(z.imag()));
  } else if (value.isString()) {
    const std::string_view text = value.toStringView();
    push(kString);
    push(static_cast<int64_t>(text.size()));
    for (size_t i = 0; i < text.size(); i += sizeof(int64_t)) {
      int64_t word = 0;
      std::memcpy(&word, text.data() + i, std::min(sizeof(int64_t), text.size() - i));
      push(word);
    }
  } else if (value.isDevice()) {
    push(kDevice);
    push(static_cast<int64_t>(value.toDevice().type()));
    push(value.toDevice().index());
  } else if (value.isList()) {
    const auto list = value.toListRef();
    push(kList);
    push(static_cast<int64_t>(list.size()));
    for (const c10::IValue& element : list) {
      if (!add(element, kindOnly)) return false;
    }
  } else if (value.isGenerator()) {
    push(kGenerator);  // a Meta kernel draws no numbers: which generator does not matter
  } else if (value.isTuple()) {
    const auto elements = value.toTupleRef().elements();
    push(kTuple);
    push(static_cast<int64_t>(elements.size()));
    for (const c10::IValue& element : elements) {
      if (!add(element, kindOnly)) return false;
    }
  } else {
    return false;  // a symbolic float, an object, a storage...
  }
  return true;
}

// [marker: shape-signature]
bool Signature::build(c10::ArrayRef<c10::IValue> args, uint64_t kindOnly) {
  words_.clear();
  hash_ = 0;
  push(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())));
  for (size_t i = 0; i < args.size(); ++i) {
    if (!add(args[i], i < 64 && (kindOnly >> i & 1) != 0)) return false;
  }
  return true;
}

std::shared_ptr<const MetaAnswer> ShapeCache::find(const Signature& signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = answers_.find(signature);
  return it == answers_.end() ? nullptr : it->second;
}

void ShapeCache::insert(Signature signature, std::shared_ptr<const MetaAnswer> answer) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (answers_.size() >= kMaxEntries) answers_.clear();
  answers_.insert_or_assign(std::move(signature), std::move(answer));
}

}  // namespace openreg::engine
