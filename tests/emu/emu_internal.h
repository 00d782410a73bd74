// emu_internal.h: what the parts of the CUDA emulation share (emu.h).
#pragma once
#include <cuda_runtime.h>

#include <functional>

namespace emu {
// The sticky launch error cudaGetLastError returns and clears.
void set_error(cudaError_t e);

// The device's work queue. Kernel launches, asynchronous copies and sets,
// and event records are queued, in issue order over all streams (a valid
// order for any stream dependencies, since an awaited event was always
// issued earlier); they run when the host synchronises: a stream, event or
// device synchronisation, a synchronous copy or set, a free, or a library
// call (the library stand-ins run at once, after what is queued). So host
// code that reads a result before synchronising, or rewrites a buffer a
// queued copy has yet to read, sees what it would on a GPU, not a result
// that happened to be ready. EMU_SYNC=1 runs everything at once instead.
void enqueue(std::function<void()> op);
void flush();
}  // namespace emu
