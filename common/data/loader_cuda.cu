// loader_cuda.cu: the CUDA side of the loader's ring (loader.h).
#include "core/check_cuda.h"
#include "data/loader.h"

extern "C" void loader_thread_start_cuda(const Device *dev) {
  // The current device is per host thread: a worker starts on device 0.
  CHECK_CUDA(cudaSetDevice(dev->index));
}

extern "C" cudaEvent_t loader_event_create_cuda(void) {
  cudaEvent_t event;
  CHECK_CUDA(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

extern "C" void loader_event_destroy_cuda(cudaEvent_t event) { CHECK_CUDA(cudaEventDestroy(event)); }

extern "C" void loader_copy_async_cuda(const Device *dev, void *dst, const void *src,
                                       size_t bytes, cudaEvent_t consumed, cudaEvent_t copied) {
  // The device buffer is free once the compute stream is past the batch that
  // used this ring slot before.
  CHECK_CUDA(cudaStreamWaitEvent(dev->copy_stream, consumed, 0));
  CHECK_CUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, dev->copy_stream));
  CHECK_CUDA(cudaEventRecord(copied, dev->copy_stream));
}

extern "C" void loader_stream_wait_cuda(const Device *dev, cudaEvent_t copied) {
  CHECK_CUDA(cudaStreamWaitEvent(dev->stream, copied, 0));
}

extern "C" void loader_record_cuda(const Device *dev, cudaEvent_t consumed) {
  CHECK_CUDA(cudaEventRecord(consumed, dev->stream));
}

extern "C" void loader_event_sync_cuda(cudaEvent_t event) { CHECK_CUDA(cudaEventSynchronize(event)); }
