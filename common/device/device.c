// device.c: device detection and the CPU halves of the device layer; CUDA
// calls go to device_cuda.cu in builds that have it.
#include "device/device.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
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

// OpenBLAS's x86 kernel sets by the widest vectors they use.
static const struct {
  const char *name;
  int level;
} kBlasKernels[] = {
    {"katmai", 0},     {"coppermine", 0}, {"northwood", 0},  {"prescott", 0},    {"banias", 0},
    {"core2", 0},      {"penryn", 0},     {"dunnington", 0}, {"nehalem", 0},     {"atom", 0},
    {"opteron", 0},    {"opteron_sse3", 0}, {"barcelona", 0}, {"bobcat", 0},     {"nano", 0},
    {"sandybridge", 1}, {"bulldozer", 1}, {"piledriver", 1}, {"steamroller", 1}, {"excavator", 1},
    {"haswell", 2},    {"zen", 2},        {"skylakex", 3},   {"cooperlake", 3},  {"sapphirerapids", 3},
};
static const char *const kBlasBest[] = {NULL, "Sandybridge", "Haswell", "SkylakeX"};

const char *device_blas_better_kernels(const char *chosen, int level) {
  if (level < 1 || level > 3 || !chosen) return NULL;
  for (size_t i = 0; i < sizeof kBlasKernels / sizeof kBlasKernels[0]; i++)
    if (strcasecmp(chosen, kBlasKernels[i].name) == 0)
      return kBlasKernels[i].level < level ? kBlasBest[level] : NULL;
  return NULL;
}

static int cpu_vector_level(void) {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
    return 3;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 2;
  return __builtin_cpu_supports("avx") ? 1 : 0;
}

// Set in the environment of the second execution: the kernels OpenBLAS chose.
#define BLAS_CHOSE_ENV "MLPERF_BLAS_CHOSE"
static char blas_note[256];

void device_blas_kernels(char **argv) {
  const char *chose = getenv(BLAS_CHOSE_ENV);
  if (chose) {
    snprintf(blas_note, sizeof blas_note,
             "blas: OpenBLAS chose its %s kernels, older than this CPU's; %s kernels in use "
             "(OPENBLAS_CORETYPE chooses)", chose, openblas_get_corename());
    unsetenv(BLAS_CHOSE_ENV);
    return;
  }
  if (getenv("OPENBLAS_CORETYPE")) return;
  const char *chosen = openblas_get_corename();
  const char *better = device_blas_better_kernels(chosen, cpu_vector_level());
  if (!better) return;
  char name[64];
  snprintf(name, sizeof name, "%s", chosen);
  setenv(BLAS_CHOSE_ENV, name, 1);
  setenv("OPENBLAS_CORETYPE", better, 1);
  fflush(NULL);
  char self[4096];  // the file itself, so that the process keeps its name
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    self[n] = '\0';
    execv(self, argv);
  }
  // Not run again: carry on with the kernels OpenBLAS chose.
  fprintf(stderr, "warning: OpenBLAS chose its %s kernels, older than this CPU's; running again with "
          "OPENBLAS_CORETYPE=%s failed (%s); set it by hand for about 4x the speed\n", name, better,
          strerror(errno));
  unsetenv(BLAS_CHOSE_ENV);
  unsetenv("OPENBLAS_CORETYPE");
}

const char *device_blas_note(void) { return blas_note[0] ? blas_note : NULL; }

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
