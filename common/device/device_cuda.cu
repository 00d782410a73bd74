// device_cuda.cu: the CUDA halves of the device layer.
#include <string.h>

#include "core/check_cuda.h"
#include "device/device.h"

// cuBLASLt and cuDNN share one workspace on the compute stream.
static const size_t kWorkspaceBytes = (size_t)256 << 20;

extern "C" int device_cuda_count_cuda(void) {
  // No driver, an old driver or no device all mean "no GPU", not an error.
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return count;
}

extern "C" void device_open_cuda(Device *dev, int index) {
  int count = device_cuda_count_cuda();
  if (index >= count)
    die_input("device", "GPU %d asked for, but %d usable GPU(s) were found", index, count);
  CHECK_CUDA(cudaSetDevice(index));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, index));
  const char *vendor = strncmp(prop.name, "NVIDIA ", 7) == 0 ? "" : "NVIDIA ";
  snprintf(dev->name, sizeof dev->name, "%s%.240s", vendor, prop.name);
  dev->sm_major = prop.major;
  dev->sm_minor = prop.minor;
  dev->sm_count = prop.multiProcessorCount;
  dev->memory_bytes = prop.totalGlobalMem;
  // Blocking streams: device_copy and device_zero run on the legacy default
  // stream, which then waits for the work queued here and is waited for by
  // what comes after (with non-blocking streams they would race with it).
  CHECK_CUDA(cudaStreamCreateWithFlags(&dev->stream, cudaStreamDefault));
  CHECK_CUDA(cudaStreamCreateWithFlags(&dev->copy_stream, cudaStreamDefault));
  CHECK_CUDA(cudaStreamCreateWithFlags(&dev->comm_stream, cudaStreamDefault));
  CHECK_CUBLAS(cublasCreate(&dev->cublas));
  CHECK_CUBLAS(cublasSetStream(dev->cublas, dev->stream));
  CHECK_CUBLAS(cublasLtCreate(&dev->cublaslt));
  CHECK_CUDNN(cudnnCreate(&dev->cudnn));
  CHECK_CUDNN(cudnnSetStream(dev->cudnn, dev->stream));
  dev->workspace_bytes = kWorkspaceBytes;
  CHECK_CUDA(cudaMalloc(&dev->workspace, dev->workspace_bytes));
  CHECK_CUBLAS(cublasSetWorkspace(dev->cublas, dev->workspace, dev->workspace_bytes));
}

extern "C" void device_close_cuda(Device *dev) {
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUDA(cudaFree(dev->workspace));
  CHECK_CUDNN(cudnnDestroy(dev->cudnn));
  CHECK_CUBLAS(cublasLtDestroy(dev->cublaslt));
  CHECK_CUBLAS(cublasDestroy(dev->cublas));
  CHECK_CUDA(cudaStreamDestroy(dev->stream));
  CHECK_CUDA(cudaStreamDestroy(dev->copy_stream));
  CHECK_CUDA(cudaStreamDestroy(dev->comm_stream));
}

extern "C" void device_sync_cuda(const Device *dev) {
  CHECK_CUDA(cudaStreamSynchronize(dev->stream));
}

extern "C" void *device_alloc_cuda(size_t bytes) {
  void *p = NULL;
  CHECK_CUDA(cudaMalloc(&p, bytes ? bytes : 1));
  return p;
}

extern "C" void device_free_cuda(void *ptr) { CHECK_CUDA(cudaFree(ptr)); }

extern "C" void *device_alloc_pinned_cuda(size_t bytes) {
  void *p = NULL;
  CHECK_CUDA(cudaMallocHost(&p, bytes ? bytes : 1));
  return p;
}

extern "C" void device_free_pinned_cuda(void *ptr) { CHECK_CUDA(cudaFreeHost(ptr)); }

extern "C" void device_copy_cuda(void *dst, const void *src, size_t bytes) {
  CHECK_CUDA(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault));
}

extern "C" void device_zero_cuda(void *ptr, size_t bytes) {
  CHECK_CUDA(cudaMemset(ptr, 0, bytes));
}

extern "C" void device_timer_start_cuda(DeviceTimer *t) {
  CHECK_CUDA(cudaEventCreate(&t->start));
  CHECK_CUDA(cudaEventCreate(&t->stop));
  CHECK_CUDA(cudaEventRecord(t->start, t->dev->stream));
}

extern "C" double device_timer_stop_ms_cuda(DeviceTimer *t) {
  float ms = 0;
  CHECK_CUDA(cudaEventRecord(t->stop, t->dev->stream));
  CHECK_CUDA(cudaEventSynchronize(t->stop));
  CHECK_CUDA(cudaEventElapsedTime(&ms, t->start, t->stop));
  CHECK_CUDA(cudaEventDestroy(t->start));
  CHECK_CUDA(cudaEventDestroy(t->stop));
  return ms;
}
