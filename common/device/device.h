// device.h: the device layer. Detects a usable GPU (no driver or no device
// means CPU), owns the CUDA streams and library handles, and moves memory.
// Everything here compiles without CUDA; the CUDA parts live in device_cuda.cu.
#pragma once
#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DEVICE_CPU = 0, DEVICE_CUDA = 1 } DeviceKind;

// The CUDA libraries' own handle types, declared so C code can hold them.
struct CUstream_st;
struct CUevent_st;
struct cublasContext;
struct cublasLtContext;
struct cudnnContext;

typedef struct Device {
  DeviceKind kind;
  int index;                        // CUDA ordinal
  struct CUstream_st *stream;       // compute
  struct CUstream_st *copy_stream;  // host-to-device input copies
  struct CUstream_st *comm_stream;  // gradient all-reduce
  struct cublasContext *cublas;
  struct cublasLtContext *cublaslt;
  struct cudnnContext *cudnn;
  void *workspace;                  // for cuBLASLt and cuDNN on `stream`
  size_t workspace_bytes;
  bool linear_unfused;              // op_linear_set_epilogues(dev, false) was called
  char name[256];
  int sm_major, sm_minor, sm_count;
  size_t memory_bytes;
} Device;

// Number of usable CUDA devices; 0 without a driver, without a device, or in a
// CUDA=0 build.
int device_cuda_count(void);
bool device_cuda_available(void);
// "cpu" | "cuda" | "auto" (cuda when a GPU is present). "cuda" on a machine
// without one is a one-line error naming the flag.
DeviceKind device_kind_parse(const char *flag_name, const char *value);
const char *device_kind_name(DeviceKind kind);

// Opens the device: on CUDA selects the ordinal, creates the streams, the
// cuBLAS/cuBLASLt/cuDNN handles and the workspace.
void device_open(Device *dev, DeviceKind kind, int index);
void device_close(Device *dev);
// This rank's CPU cores: those it is bound to when bound (taskset, mpirun's
// binding), else the machine's cores over local_ranks (at least 1). And
// OpenBLAS's thread count (device_open sets 1; at least 1;
// OPENBLAS_NUM_THREADS in the environment wins).
int device_cpu_share(int local_ranks);
void device_blas_threads_set(int threads);
// OpenBLAS picks its kernel set (OPENBLAS_CORETYPE) from the CPU's model
// when it loads; a model it does not know (Debian 12's OpenBLAS 0.3.21 on
// some Xeons, or on virtual machines that hide the model) gets the SSE3
// "Prescott" kernels, about a quarter of the speed of the AVX-512 ones on
// the same core. device_blas_kernels(argv), first thing in main (run_init
// calls it before MPI starts): when the kernels OpenBLAS chose are of an
// older family than the CPU runs (its AVX, AVX2 + FMA, AVX-512 flags) and
// OPENBLAS_CORETYPE is not set, sets it to that family's kernels and
// executes the program again, the same process with the same arguments.
// OPENBLAS_CORETYPE set by the user is never changed.
void device_blas_kernels(char **argv);
// After device_blas_kernels: NULL, or the line that says it chose the
// kernels ("OpenBLAS chose its Prescott kernels ...").
const char *device_blas_note(void);
// The decision, apart from the CPU: the kernel set to use instead of
// `chosen` (OpenBLAS's core name, any case) on a CPU whose widest vectors are
// `level` (0 SSE only, 1 AVX, 2 AVX2 + FMA, 3 AVX-512 F/BW/DQ/VL), or NULL to
// keep it: kept when it is as new as the CPU, or a name this table does not
// know (a newer OpenBLAS's).
const char *device_blas_better_kernels(const char *chosen, int level);
void device_sync(const Device *dev);
// "1xNVIDIA H100 80GB HBM3"-style platform name, or the CPU model.
void device_describe(const Device *dev, char *buf, size_t buf_bytes);

// Memory on a device kind, 256-byte aligned. CUDA allocations are plain
// cudaMalloc; pinned host memory for CUDA copies comes from device_alloc_pinned.
void *device_alloc(DeviceKind kind, size_t bytes);
void device_free(DeviceKind kind, void *ptr);
void *device_alloc_pinned(size_t bytes);  // plain malloc without CUDA
void device_free_pinned(void *ptr);
// Copies between any two of host and device memory; synchronous.
void device_copy(DeviceKind dst_kind, void *dst, DeviceKind src_kind, const void *src,
                 size_t bytes);
void device_zero(DeviceKind kind, void *ptr, size_t bytes);
// A new copy of `bytes` of host memory on a device kind (device_alloc, then
// device_copy); free it with device_free.
void *device_upload(DeviceKind kind, const void *host, size_t bytes);

// Wall time of device work: events on CUDA, the host clock on CPU.
typedef struct DeviceTimer {
  const Device *dev;
  struct CUevent_st *start, *stop;
  double start_s;
} DeviceTimer;
void device_timer_start(DeviceTimer *t, const Device *dev);
double device_timer_stop_ms(DeviceTimer *t);  // waits for the device

#if HAVE_CUDA
// The CUDA halves of the functions above (device_cuda.cu).
int device_cuda_count_cuda(void);
void device_open_cuda(Device *dev, int index);
void device_close_cuda(Device *dev);
void device_sync_cuda(const Device *dev);
void *device_alloc_cuda(size_t bytes);
void device_free_cuda(void *ptr);
void *device_alloc_pinned_cuda(size_t bytes);
void device_free_pinned_cuda(void *ptr);
void device_copy_cuda(void *dst, const void *src, size_t bytes);
void device_zero_cuda(void *ptr, size_t bytes);
void device_timer_start_cuda(DeviceTimer *t);
double device_timer_stop_ms_cuda(DeviceTimer *t);
#endif

#ifdef __cplusplus
}
#endif
