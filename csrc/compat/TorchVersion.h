// What differs between the torch releases libtorch_openreg builds for, in C++: see Note [Version
// gates] in torch_openreg/_compat.py (the Python half, with the supported window and the rule).
//
// OPENREG_TORCH_BEFORE(X, Y) is true when building against a torch older than X.Y: a gate reads
// "needed while torch < X.Y" and goes when the oldest supported release reaches X.Y.
// tests/test_versions.py lists every use and fails if one names a release outside the window.
#pragma once

#include <torch/headeronly/version.h>

#define OPENREG_TORCH_BEFORE(major, minor) \
  (TORCH_VERSION_MAJOR < (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR < (minor)))

// The window of _compat.py (OLDEST, NEWEST); a build outside it stops here with the reason.
#define OPENREG_TORCH_OLDEST_MAJOR 2
#define OPENREG_TORCH_OLDEST_MINOR 13
#define OPENREG_TORCH_NEWEST_MAJOR 2
#define OPENREG_TORCH_NEWEST_MINOR 15
static_assert(
    !OPENREG_TORCH_BEFORE(OPENREG_TORCH_OLDEST_MAJOR, OPENREG_TORCH_OLDEST_MINOR),
    "torch_openreg builds for torch 2.13 to 2.15: this torch is older (docs/versions.md)");
static_assert(
    OPENREG_TORCH_BEFORE(OPENREG_TORCH_NEWEST_MAJOR, OPENREG_TORCH_NEWEST_MINOR + 1),
    "torch_openreg builds for torch 2.13 to 2.15: this torch is newer; add it to the window "
    "(docs/versions.md, 'Adding a release')");
