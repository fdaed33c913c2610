// The caching allocators' settings, as users of real accelerators tune them.
//
// [marker: allocator-config]
// Note [Allocator configuration]
// Read from PYTORCH_ALLOC_CONF (shared by every accelerator) and PYTORCH_OPENREG_ALLOC_CONF (this
// device's own, which wins key by key), in CUDA's syntax and with CUDA's meaning:
// "max_split_size_mb:128,roundup_power2_divisions:[256:4,>:1],expandable_segments:True". The
// values live where PyTorch keeps them for every accelerator, c10's AcceleratorAllocatorConfig:
// the device allocator reads them from there, and ATen's caching host allocator (pinned memory)
// reads its pinned_* keys there itself. What this file adds is strictness: c10's parser ignores a
// key it does not know and answers "stoull" for a bad number. Here an unknown key, or a bad value,
// is an error that names the variable, the key and what it accepts, raised when the allocator is
// first used (each device's first allocation) or by _set_allocator_settings. Keys that only mean
// something to CUDA's allocator (backend, release_lock_on_cudamalloc, ...) are left to CUDA when
// they come from the shared variable, and refused in openreg's own.
#pragma once

#include <string>

#include "core/Macros.h"

namespace openreg::allocator {

// Reads both variables once per process and applies them; raises c10::Error for a bad one.
// Called before the first device allocation.
OPENREG_TORCH_API void loadAllocatorConfig();

// torch.openreg.memory._set_allocator_settings: the keys given replace their current values, as
// CUDA's _set_allocator_settings does; the others keep theirs.
OPENREG_TORCH_API void setAllocatorSettings(const std::string& settings);

// The settings in effect, in the variables' syntax (only keys set by a variable or a call).
OPENREG_TORCH_API std::string allocatorSettings();

}  // namespace openreg::allocator
