#include "core/DeviceTrace.h"

namespace openreg::trace {

std::atomic<bool> gEnabled{false};

}  // namespace openreg::trace
