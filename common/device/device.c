// device.c: device detection and the CPU halves of the device layer; CUDA
// calls go to device_cuda.cu in builds that have it.
#include "device/device.h"

#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cblas.h>

#include "core/check.h"
#include "core/progress.h"

int device_cuda_count(void) {
#if HAVE_CUDA
  return device_cuda_count_cuda();
#else
  return 0;
#endif
}

bool device_cuda_available(void) { return device_cuda_count() > 0; }

const char *device_kind_name(DeviceKind kind) { return kind == DEVICE_CUDA ? "cuda" : "cpu"; }

DeviceKind device_kind_parse(const char *flag_name, const char *value) {
  if (strcmp(value, "cpu") == 0) return DEVICE_CPU;
  if (strcmp(value, "auto") == 0) return device_cuda_available() ? DEVICE_CUDA : DEVICE_CPU;
  if (strcmp(value, "cuda") == 0) {
    if (!HAVE_CUDA) die_input(flag_name, "'cuda' asked for, but this build has no CUDA (built with CUDA=0)");
    if (!device_cuda_available())
      die_input(flag_name, "'cuda' asked for, but no usable GPU was found (use cpu or auto)");
    return DEVICE_CUDA;
  }
  die_input(flag_name, "'%s' is not a device; use cpu, cuda or auto", value);
}

static void cpu_model_name(char *buf, size_t buf_bytes) {
  snprintf(buf, buf_bytes, "CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f) return;
  char line[512];
  while (fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      colon += 2;
      colon[strcspn(colon, "\n")] = 0;
      snprintf(buf, buf_bytes, "%s", colon);
      break;
    }
  }
  fclose(f);
}

void device_open(Device *dev, DeviceKind kind, int index) {
  memset(dev, 0, sizeof *dev);
  dev->kind = kind;
  dev->index = index;
  if (kind == DEVICE_CPU) {
    cpu_model_name(dev->name, sizeof dev->name);
    // One BLAS thread per GEMM: the ops' team (core/parallel.h), the loader
    // threads and MPI ranks supply the parallelism. On 2 cores a small-scale
    // ResNet epoch took 13.1 s so against 15.7 s with OpenBLAS's default 2
    // threads competing with the loader. OPENBLAS_NUM_THREADS overrides.
    device_blas_threads_set(1);
    return;
  }
#if HAVE_CUDA
  device_open_cuda(dev, index);
#else
  DIE("device_open: CUDA device asked for in a CUDA=0 build");
#endif
}

int device_cpu_share(int local_ranks) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online < 1) online = 1;
  cpu_set_t set;  // the cores this process may run on (taskset, cpusets, mpirun's binding)
  int allowed = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
  if (allowed > 0 && allowed < online) return allowed;
  int share = (int)online / (local_ranks > 0 ? local_ranks : 1);
  return share > 0 ? share : 1;
}

void device_blas_threads_set(int threads) {
  if (!getenv("OPENBLAS_NUM_THREADS")) openblas_set_num_threads(threads > 0 ? threads : 1);
}

void device_close(Device *dev) {
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) device_close_cuda(dev);
#endif
  memset(dev, 0, sizeof *dev);
}

void device_sync(const Device *dev) {
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) device_sync_cuda(dev);
#else
  (void)dev;
#endif
}

void device_describe(const Device *dev, char *buf, size_t buf_bytes) {
  snprintf(buf, buf_bytes, "1x%s", dev->name);
}

void *device_alloc(DeviceKind kind, size_t bytes) {
#if HAVE_CUDA
  if (kind == DEVICE_CUDA) return device_alloc_cuda(bytes);
#endif
  if (kind == DEVICE_CUDA) DIE("device_alloc: CUDA memory in a CUDA=0 build");
  // 256-byte aligned like cudaMalloc, so arenas and vector loads behave alike.
  void *p = NULL;
  if (posix_memalign(&p, 256, bytes ? bytes : 1) != 0) {
    char detail[64];
    snprintf(detail, sizeof detail, "%zu bytes", bytes);
    check_fail("posix_memalign", detail, __FILE__, __LINE__, "the host is out of memory");
  }
  return p;
}

void device_free(DeviceKind kind, void *ptr) {
  if (!ptr) return;
#if HAVE_CUDA
  if (kind == DEVICE_CUDA) {
    device_free_cuda(ptr);
    return;
  }
#endif
  (void)kind;
  free(ptr);
}

void *device_alloc_pinned(size_t bytes) {
#if HAVE_CUDA
  if (device_cuda_available()) return device_alloc_pinned_cuda(bytes);
#endif
  return xmalloc(bytes);
}

void device_free_pinned(void *ptr) {
  if (!ptr) return;
#if HAVE_CUDA
  if (device_cuda_available()) {
    device_free_pinned_cuda(ptr);
    return;
  }
#endif
  free(ptr);
}

void *device_upload(DeviceKind kind, const void *host, size_t bytes) {
  void *dst = device_alloc(kind, bytes);
  device_copy(kind, dst, DEVICE_CPU, host, bytes);
  return dst;
}

void device_copy(DeviceKind dst_kind, void *dst, DeviceKind src_kind, const void *src,
                 size_t bytes) {
  if (bytes == 0) return;
  if (dst_kind == DEVICE_CPU && src_kind == DEVICE_CPU) {
    memmove(dst, src, bytes);
    return;
  }
#if HAVE_CUDA
  device_copy_cuda(dst, src, bytes);
#else
  DIE("device_copy: CUDA memory in a CUDA=0 build");
#endif
}

void device_zero(DeviceKind kind, void *ptr, size_t bytes) {
  if (bytes == 0) return;
#if HAVE_CUDA
  if (kind == DEVICE_CUDA) {
    device_zero_cuda(ptr, bytes);
    return;
  }
#endif
  (void)kind;
  memset(ptr, 0, bytes);
}

void device_timer_start(DeviceTimer *t, const Device *dev) {
  memset(t, 0, sizeof *t);
  t->dev = dev;
#if HAVE_CUDA
  if (dev->kind == DEVICE_CUDA) {
    device_timer_start_cuda(t);
    return;
  }
#endif
  t->start_s = time_now_s();
}

double device_timer_stop_ms(DeviceTimer *t) {
#if HAVE_CUDA
  if (t->dev->kind == DEVICE_CUDA) return device_timer_stop_ms_cuda(t);
#endif
  return (time_now_s() - t->start_s) * 1e3;
}
