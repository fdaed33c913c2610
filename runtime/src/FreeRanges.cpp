#include "FreeRanges.h"

namespace openreg {

void FreeRanges::reset(std::size_t offset, std::size_t length) {
  clear();
  if (length != 0) insert(offset, length);
}

void FreeRanges::clear() {
  byOffset_.clear();
  bySize_.clear();
}

void FreeRanges::insert(std::size_t offset, std::size_t length) {
  byOffset_.emplace(offset, length);
  bySize_.emplace(length, offset);
}

void FreeRanges::erase(std::map<std::size_t, std::size_t>::iterator it) {
  bySize_.erase({it->second, it->first});
  byOffset_.erase(it);
}

// [marker: range-allocator]
bool FreeRanges::take(std::size_t length, std::size_t* offset) {
  auto fit = length == 0 ? bySize_.end() : bySize_.lower_bound({length, 0});
  if (fit == bySize_.end()) return false;
  const auto [found, start] = *fit;
  erase(byOffset_.find(start));
  if (found > length) insert(start + length, found - length);
  *offset = start;
  return true;
}

void FreeRanges::give(std::size_t offset, std::size_t length) {
  std::size_t start = offset, end = offset + length;
  auto next = byOffset_.lower_bound(offset);
  if (next != byOffset_.end() && next->first == end) {
    end += next->second;
    erase(next);
  }
  auto prev = byOffset_.lower_bound(offset);
  if (prev != byOffset_.begin()) {
    --prev;
    if (prev->first + prev->second == start) {
      start = prev->first;
      erase(prev);
    }
  }
  insert(start, end - start);
}

}  // namespace openreg
