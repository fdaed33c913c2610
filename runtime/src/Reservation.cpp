#include "Reservation.h"

#include <iterator>

namespace openreg {

bool Reservation::runAt(std::uintptr_t p, std::uintptr_t* begin, std::uintptr_t* end) const {
  auto it = runs_.upper_bound(p);
  if (it == runs_.begin()) return false;
  --it;
  if (p >= it->second) return false;
  *begin = it->first;
  *end = it->second;
  return true;
}

bool Reservation::anyMapped(std::uintptr_t begin, std::uintptr_t end) const {
  auto it = runs_.lower_bound(begin);
  if (it != runs_.end() && it->first < end) return true;  // a run starts inside
  if (it == runs_.begin()) return false;
  return std::prev(it)->second > begin;  // the run before reaches into it
}

void Reservation::map(std::uintptr_t begin, std::uintptr_t end) {
  mapped_ += end - begin;
  auto next = runs_.find(end);
  if (next != runs_.end()) {
    end = next->second;
    runs_.erase(next);
  }
  auto it = runs_.lower_bound(begin);
  if (it != runs_.begin()) {
    auto prev = std::prev(it);
    if (prev->second == begin) {
      prev->second = end;
      return;
    }
  }
  runs_.emplace(begin, end);
}

void Reservation::unmap(std::uintptr_t begin, std::uintptr_t end) {
  mapped_ -= end - begin;
  auto it = std::prev(runs_.upper_bound(begin));
  const std::uintptr_t runEnd = it->second;
  if (it->first == begin) {
    runs_.erase(it);
  } else {
    it->second = begin;
  }
  if (end < runEnd) runs_.emplace(end, runEnd);
}

}  // namespace openreg
