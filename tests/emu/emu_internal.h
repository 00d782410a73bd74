// emu_internal.h: what the parts of the CUDA emulation share (emu.h).
#pragma once
#include <cuda_runtime.h>

#include <stddef.h>

#include <functional>
#include <memory>

namespace emu {
// Stops the program with the running kernel's name and block, as a launch
// that faults on the GPU would (exit status 70).
[[noreturn]] void kernel_fail(const char *what);

// Shared memory (emu_shared.cpp): one arena holds the dynamic shared memory
// of the running block and every static __shared__ variable, so that one
// range check tells a shared-memory access from any other. The kernel
// runner tells it where a launch is: a block starts (a fresh dynamic part
// of `dynamic_bytes` and a clean race check), a barrier releases the block,
// and which thread runs (its linear index; -1 between blocks).
const size_t kDynamicSharedMaxBytes = 48 * 1024;  // more needs cudaFuncSetAttribute
void shared_block_begin(size_t dynamic_bytes);
void shared_barrier();
void shared_set_thread(int linear);

// The sticky launch error cudaGetLastError returns and clears.
void set_error(cudaError_t e);

// The device's work. Kernel launches, asynchronous copies and sets, event
// records, GEMMs and convolutions are queued on their stream, each stream in
// issue order, a stream's wait on an event as a dependency on the record it
// waits for, and the legacy default stream (0) ordered against the blocking
// streams as CUDA orders it. Nothing runs until the host needs it:
// - sync_stream runs what the stream's queued work depends on and no more,
//   so work on another stream that nothing awaited stays queued;
// - flush runs everything (device synchronisation, a free, a cuDNN Find),
//   oldest first, or with EMU_REVERSE=1 the newest work whose dependencies
//   are met first.
// So a missing wait between streams, or host code that reads a result (or
// rewrites a buffer a queued copy has yet to read) without synchronising,
// gets the stale data it could get on a GPU, not a result that happened to
// be ready. EMU_SYNC=1 runs everything at once instead.
// enqueue returns cudaErrorInvalidResourceHandle for a stream that was
// never created (or is destroyed).
struct Work;
using WorkRef = std::shared_ptr<Work>;
// Queues op on the stream, behind `after` too if given (work on any stream);
// *queued names the new work if asked for.
cudaError_t enqueue(cudaStream_t stream, std::function<void()> op, WorkRef after = nullptr,
                    WorkRef *queued = nullptr);
cudaError_t sync_stream(cudaStream_t stream);
void sync_work(const WorkRef &work);  // runs it and what it waits for
void flush();
// Counts a call that blocks the host until device work is done, for
// emu_activity.h (the runtime's own calls count themselves).
void note_host_wait(const char *call);
// Runs call() once all queued work has run, with no device work running
// meanwhile: host MPI calls go through this, since queued NCCL collectives
// are MPI calls too (emu_libs.cpp).
int with_device_idle(const std::function<int()> &call);
}  // namespace emu
