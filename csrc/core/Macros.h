// OPENREG_TORCH_API marks what libtorch_openreg exports (it is built with hidden visibility).
#pragma once

#define OPENREG_TORCH_API __attribute__((visibility("default")))
