// profile_cuda.cu: the event pool behind profile.h's CUDA timing. Span i
// uses events 2i (begin) and 2i + 1 (end), recorded on dev->stream.
#include "core/check_cuda.h"
#include "device/profile.h"

#define PROFILE_EVENTS 8192

static cudaEvent_t g_events[PROFILE_EVENTS];
static bool g_created;

extern "C" int profile_cuda_pool_size(void) { return PROFILE_EVENTS; }

extern "C" void profile_cuda_record(const Device *dev, int event) {
  if (!g_created) {
    for (int i = 0; i < PROFILE_EVENTS; i++) CHECK_CUDA(cudaEventCreate(&g_events[i]));
    g_created = true;
  }
  CHECK_CUDA(cudaEventRecord(g_events[event], dev->stream));
}

extern "C" float profile_cuda_elapsed_ms(int begin_event, int end_event) {
  float ms = 0;
  CHECK_CUDA(cudaEventElapsedTime(&ms, g_events[begin_event], g_events[end_event]));
  return ms;
}
