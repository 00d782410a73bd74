// check_cuda.h: the check macros for the CUDA libraries (CUDA runtime, cuBLAS,
// cuBLASLt, cuDNN, NCCL). Included only by code built with HAVE_CUDA.
#pragma once
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "core/check.h"

#define CHECK_CUDA(expr)                                                     \
  do {                                                                       \
    cudaError_t check_rc_ = (expr);                                          \
    if (check_rc_ != cudaSuccess)                                            \
      check_fail(#expr, cudaGetErrorString(check_rc_), __FILE__, __LINE__,   \
                 check_cuda_hint((int)check_rc_));                           \
  } while (0)

// After a kernel launch: a bad configuration shows up here, not at the launch.
#define CHECK_LAUNCH() CHECK_CUDA(cudaGetLastError())

#define CHECK_CUBLAS(expr)                                                   \
  do {                                                                       \
    cublasStatus_t check_rc_ = (expr);                                       \
    if (check_rc_ != CUBLAS_STATUS_SUCCESS)                                  \
      check_fail(#expr, cublasGetStatusString(check_rc_), __FILE__, __LINE__, \
                 NULL);                                                      \
  } while (0)

#define CHECK_CUDNN(expr)                                                    \
  do {                                                                       \
    cudnnStatus_t check_rc_ = (expr);                                        \
    if (check_rc_ != CUDNN_STATUS_SUCCESS)                                   \
      check_fail(#expr, cudnnGetErrorString(check_rc_), __FILE__, __LINE__,  \
                 "set CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr for cuDNN's reason"); \
  } while (0)

#define CHECK_NCCL(expr)                                                     \
  do {                                                                       \
    ncclResult_t check_rc_ = (expr);                                         \
    if (check_rc_ != ncclSuccess)                                            \
      check_fail(#expr, ncclGetErrorString(check_rc_), __FILE__, __LINE__,   \
                 "set NCCL_DEBUG=INFO for NCCL's own log");                  \
  } while (0)

#ifdef __cplusplus
extern "C" {
#endif
const char *check_cuda_hint(int cuda_error);
#ifdef __cplusplus
}
#endif
