// emu_runtime.cpp: the CUDA runtime calls the project makes, for the CUDA
// emulation (emu.h). Devices whose memory is host memory, and one work queue
// (emu_internal.h): launches, asynchronous copies and sets and event records
// wait in it until the host synchronises; events record the wall clock at
// the moment the queue reaches them.
//
// Device allocations are filled with 0xff bytes (a NaN in every float
// type), as freshly allocated GPU memory holds whatever was there: code that
// reads before it writes gets NaNs, not convenient zeros.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <deque>
#include <mutex>

#include "emu_internal.h"

namespace emu {
namespace {
cudaError_t g_last_error = cudaSuccess;
// Stands for every stream: the calls ignore which.
int g_stream_token;
struct Event {
  double ms;
};
double now_ms() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}
int env_int(const char *name, int fallback) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : fallback;
}
}  // namespace
void set_error(cudaError_t e) {
  if (g_last_error == cudaSuccess) g_last_error = e;
}

namespace {
std::mutex g_queue_lock;   // guards g_queue
std::mutex g_flush_lock;   // one thread runs the queue at a time, in order
std::deque<std::function<void()>> g_queue;
bool run_at_once() {
  static const bool at_once = env_int("EMU_SYNC", 0) == 1;
  return at_once;
}
}  // namespace

void enqueue(std::function<void()> op) {
  if (run_at_once()) {
    flush();
    op();
    return;
  }
  std::lock_guard<std::mutex> hold(g_queue_lock);
  g_queue.push_back(std::move(op));
}

void flush() {
  std::lock_guard<std::mutex> running(g_flush_lock);
  for (;;) {
    std::function<void()> op;
    {
      std::lock_guard<std::mutex> hold(g_queue_lock);
      if (g_queue.empty()) return;
      op = std::move(g_queue.front());
      g_queue.pop_front();
    }
    op();
  }
}
}  // namespace emu

using emu::Event;

extern "C" {

// EMU_GPUS devices (default 2, so that two ranks of an MPI job each have
// their own, as NCCL requires); all alike.
static int device_count() { return emu::env_int("EMU_GPUS", 2); }

cudaError_t cudaGetDeviceCount(int *count) {
  *count = device_count();
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  return device >= 0 && device < device_count() ? cudaSuccess : cudaErrorInvalidDevice;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *prop, int device) {
  if (device < 0 || device >= device_count()) return cudaErrorInvalidDevice;
  memset(prop, 0, sizeof *prop);
  snprintf(prop->name, sizeof prop->name, "CUDA emulation on the CPU (tests/emu)");
  // Compute capability and SM count of an H100 by default, so that code
  // sized from them takes the H100's paths; EMU_SM_COUNT overrides the count.
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = emu::env_int("EMU_SM_COUNT", 132);
  prop->totalGlobalMem = (size_t)80 << 30;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->sharedMemPerBlock = 48 * 1024;
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **ptr, size_t bytes) {
  if (posix_memalign(ptr, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
  memset(*ptr, 0xff, bytes);
  return cudaSuccess;
}

cudaError_t cudaFree(void *ptr) {
  emu::flush();  // queued work may still use it
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void **ptr, size_t bytes) {
  if (posix_memalign(ptr, 256, bytes ? bytes : 1) != 0) return cudaErrorMemoryAllocation;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void *ptr) {
  emu::flush();
  free(ptr);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind) {
  (void)kind;
  emu::flush();
  if (bytes) memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  (void)kind, (void)stream;
  if (bytes) emu::enqueue([dst, src, bytes]() { memmove(dst, src, bytes); });
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind,
                              cudaStream_t stream) {
  (void)kind, (void)stream;
  if (width > dpitch || width > spitch) return cudaErrorInvalidPitchValue;
  emu::enqueue([=]() {
    for (size_t r = 0; r < height; r++)
      memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
  });
  return cudaSuccess;
}

cudaError_t cudaMemset(void *ptr, int value, size_t bytes) {
  emu::flush();
  if (bytes) memset(ptr, value, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *ptr, int value, size_t bytes, cudaStream_t stream) {
  (void)stream;
  if (bytes) emu::enqueue([ptr, value, bytes]() { memset(ptr, value, bytes); });
  return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned flags) {
  (void)flags;
  *stream = (cudaStream_t)&emu::g_stream_token;
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  (void)stream;
  emu::flush();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  (void)stream;
  emu::flush();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  (void)stream, (void)flags;
  return event ? cudaSuccess : cudaErrorInvalidResourceHandle;
}

cudaError_t cudaDeviceSynchronize(void) {
  emu::flush();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) {
  Event *e = (Event *)calloc(1, sizeof(Event));
  if (!e) return cudaErrorMemoryAllocation;
  *event = (cudaEvent_t)e;
  return cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned flags) {
  (void)flags;
  return cudaEventCreate(event);
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  emu::flush();  // a queued record may still write it
  free(event);
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  (void)stream;
  if (!event) return cudaErrorInvalidResourceHandle;
  Event *e = (Event *)event;
  emu::enqueue([e]() { e->ms = emu::now_ms(); });
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  emu::flush();
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return cudaErrorInvalidResourceHandle;
  emu::flush();  // done, once asked about
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start || !end) return cudaErrorInvalidResourceHandle;
  emu::flush();
  *ms = (float)(((Event *)end)->ms - ((Event *)start)->ms);
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t e = emu::g_last_error;
  emu::g_last_error = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) { return emu::g_last_error; }

const char *cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    default: return "emulated CUDA error";
  }
}

const char *cudaGetErrorName(cudaError_t error) { return cudaGetErrorString(error); }

}  // extern "C"
