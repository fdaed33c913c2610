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
  // Not the storage offset: a Meta kernel's results are new tensors, whose layout does not depend
  // on where an input starts in its storage, and a training loop's batches are rows of one tensor
  // at a new offset each step (each step asked the Meta kernel of index again). Offsets matter to
  // overlaps only, keyed below for the tensors that share storage with a written one.
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

// The tensor arguments that share storage with each written tensor argument, by their position
// among the call's tensors, and their storage offsets: with the sizes and strides already keyed,
// this decides every overlap check (at::get_overlap_status compares offsets within one storage).
void Signature::addSharedStorage(c10::ArrayRef<c10::IValue> args, uint64_t written) {
  struct Place {
    const c10::StorageImpl* storage = nullptr;
    int64_t offset = 0;
  };
  c10::SmallVector<Place, 8> places;    // every tensor argument's, in order
  c10::SmallVector<size_t, 4> writers;  // positions in `places`
  auto placeOf = [](const at::Tensor& t) {
    if (!t.defined() || !t.has_storage()) return Place{};
    return Place{t.storage().unsafeGetStorageImpl(), t.storage_offset()};
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const c10::IValue& arg = args[i];
    if (arg.isTensor()) {
      if (i < 64 && (written >> i & 1) != 0) writers.push_back(places.size());
      places.push_back(placeOf(arg.toTensor()));
    } else if (arg.isTensorList()) {
      for (const at::Tensor& t : arg.toTensorList()) places.push_back(placeOf(t));
    } else if (arg.isList()) {
      for (const c10::IValue& element : arg.toListRef())
        places.push_back(element.isTensor() ? placeOf(element.toTensor()) : Place{});
    }
  }
  for (size_t w : writers) {
    if (places[w].storage == nullptr) continue;
    push(-static_cast<int64_t>(w) - 1);  // negative: apart from the positions that follow
    push(places[w].offset);
    for (size_t j = 0; j < places.size(); ++j) {
      if (j == w || places[j].storage != places[w].storage) continue;
      push(static_cast<int64_t>(j));
      push(places[j].offset);
    }
  }
}

// [marker: shape-signature]
bool Signature::build(c10::ArrayRef<c10::IValue> args, uint64_t kindOnly, uint64_t written,
                      int mode) {
  words_.clear();
  push(static_cast<int64_t>(c10::typeMetaToScalarType(c10::get_default_dtype())) | (mode << 8));
  for (size_t i = 0; i < args.size(); ++i) {
    if (!add(args[i], i < 64 && (kindOnly >> i & 1) != 0)) return false;
  }
  if (written != 0) addSharedStorage(args, written);
  // One multiply and shift per word, once the words are known (a running splitmix64 per push cost
  // a third of the signature): enough to spread signatures of one operator over the buckets.
  uint64_t hash = words_.size();
  for (int64_t word : words_) {
    hash = (hash ^ static_cast<uint64_t>(word)) * 0x9e3779b97f4a7c15ULL;
    hash ^= hash >> 29;
  }
  hash_ = static_cast<size_t>(hash);
  return true;
}

KnownCall ShapeCache::find(const Signature& signature) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = known_.find(signature);
  return it == known_.end() ? KnownCall{} : it->second;
}

KnownCall& ShapeCache::entry(const Signature& signature) {
  if (known_.size() >= kMaxEntries && known_.find(signature) == known_.end()) known_.clear();
  return known_[signature];
}

void ShapeCache::remember(const Signature& signature, std::shared_ptr<const MetaAnswer> answer) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry(signature).answer = std::move(answer);
}

void ShapeCache::rememberChecked(const Signature& signature) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry(signature).checked = true;
}

}  // namespace openreg::engine
