// emu_internal.h: what the parts of the CUDA emulation share (emu.h).
#pragma once
#include <cuda_runtime.h>

namespace emu {
// The sticky launch error cudaGetLastError returns and clears.
void set_error(cudaError_t e);
}  // namespace emu
