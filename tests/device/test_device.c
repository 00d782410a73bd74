// The device layer: --device parsing, CPU memory, and on a GPU the handles,
// copies and timers. The progress line.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/progress.h"
#include "core/rng.h"
#include "device/device.h"
#include "tests/harness/test.h"

static void parse_cpu_and_auto(void) {
  CHECK(device_kind_parse("device", "cpu") == DEVICE_CPU);
  DeviceKind want = device_cuda_available() ? DEVICE_CUDA : DEVICE_CPU;
  CHECK(device_kind_parse("device", "auto") == want);
  CHECK_STR(device_kind_name(DEVICE_CUDA), "cuda");
}

static void parse_bad(void *ctx) { device_kind_parse("device", (const char *)ctx); }

static void parse_errors_name_the_flag(void) {
  CHECK_DIES_WITH(parse_bad, "gpu0", "error: device: 'gpu0' is not a device");
  if (!device_cuda_available())
    CHECK_DIES_WITH(parse_bad, "cuda", "error: device: 'cuda' asked for, but");
}

static void cpu_memory(void) {
  Device dev;
  device_open(&dev, DEVICE_CPU, 0);
  CHECK(strlen(dev.name) > 0);
  char desc[300];
  device_describe(&dev, desc, sizeof desc);
  CHECK(strncmp(desc, "1x", 2) == 0);
  uint8_t *a = device_alloc(DEVICE_CPU, 1000), *b = device_alloc(DEVICE_CPU, 1000);
  CHECK((uintptr_t)a % 256 == 0);
  for (int i = 0; i < 1000; i++) a[i] = (uint8_t)(i * 7);
  device_copy(DEVICE_CPU, b, DEVICE_CPU, a, 1000);
  CHECK(memcmp(a, b, 1000) == 0);
  device_zero(DEVICE_CPU, b, 500);
  CHECK(b[0] == 0 && b[499] == 0 && b[500] == a[500]);
  device_free(DEVICE_CPU, a);
  device_free(DEVICE_CPU, b);
  device_close(&dev);
}

static void gpu_open_copy_time(void) {
  if (!test_have_gpu()) test_skip("no GPU");
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  CHECK(dev.stream && dev.cublas && dev.cublaslt && dev.cudnn && dev.workspace);
  CHECK(dev.sm_major >= 7);
  CHECK(strncmp(dev.name, "NVIDIA ", 7) == 0);
  enum { N = 1 << 20 };
  float *host = device_alloc_pinned(N * sizeof(float)), *back = malloc(N * sizeof(float));
  for (int i = 0; i < N; i++) host[i] = (float)i * 0.5f;
  float *d = device_alloc(DEVICE_CUDA, N * sizeof(float));
  CHECK((uintptr_t)d % 256 == 0);
  DeviceTimer t;
  device_timer_start(&t, &dev);
  device_copy(DEVICE_CUDA, d, DEVICE_CPU, host, N * sizeof(float));
  double ms = device_timer_stop_ms(&t);
  CHECK(ms >= 0 && isfinite(ms));
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, d, N * sizeof(float));
  CHECK(memcmp(host, back, N * sizeof(float)) == 0);
  device_zero(DEVICE_CUDA, d, N * sizeof(float));
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, d, 16);
  CHECK(back[0] == 0 && back[3] == 0);
  device_free(DEVICE_CUDA, d);
  device_free_pinned(host);
  free(back);
  device_close(&dev);
}

// device_copy and device_zero are ordered with the work on dev->stream, with
// no device_sync between: a fill on the stream is seen by the copy right
// after it, and a zeroing before a fill does not land after it.
static void gpu_copy_ordered_with_stream(void) {
  if (!test_have_gpu()) test_skip("no GPU");
#if HAVE_CUDA
  enum { N = 1 << 24 };
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  float *want = malloc(N * sizeof(float)), *back = malloc(N * sizeof(float));
  float *d = device_alloc(DEVICE_CUDA, N * sizeof(float));
  rng_fill_uniform_cpu(want, N, 7, 3, 0, 0.0f, 1.0f);
  rng_fill_uniform_cuda(d, N, 7, 3, 0, 0.0f, 1.0f, dev.stream);
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, d, N * sizeof(float));
  CHECK_MSG(memcmp(want, back, N * sizeof(float)) == 0, "the copy overtook the fill");
  device_zero(DEVICE_CUDA, d, N * sizeof(float));
  rng_fill_uniform_cuda(d, N / 2, 7, 3, 0, 0.0f, 1.0f, dev.stream);
  device_copy(DEVICE_CPU, back, DEVICE_CUDA, d, N * sizeof(float));
  CHECK_MSG(memcmp(want, back, N / 2 * sizeof(float)) == 0, "the zeroing landed after the fill");
  CHECK(back[N / 2] == 0 && back[N - 1] == 0);
  device_free(DEVICE_CUDA, d);
  free(want);
  free(back);
  device_close(&dev);
#endif
}

// Which OpenBLAS kernel set replaces the one it chose, by the CPU's widest
// vectors (0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512).
static void blas_kernel_choice(void) {
  CHECK_STR(device_blas_better_kernels("Prescott", 3), "SkylakeX");
  CHECK_STR(device_blas_better_kernels("prescott", 2), "Haswell");
  CHECK_STR(device_blas_better_kernels("Core2", 1), "Sandybridge");
  CHECK_STR(device_blas_better_kernels("Nehalem", 3), "SkylakeX");
  CHECK_STR(device_blas_better_kernels("Sandybridge", 2), "Haswell");
  CHECK_STR(device_blas_better_kernels("Haswell", 3), "SkylakeX");
  CHECK_STR(device_blas_better_kernels("Zen", 3), "SkylakeX");
  // Kept: as new as the CPU, newer than it (never moved down), a CPU of SSE
  // only, a name the table does not know.
  CHECK(device_blas_better_kernels("Zen", 2) == NULL);
  CHECK(device_blas_better_kernels("SkylakeX", 3) == NULL);
  CHECK(device_blas_better_kernels("Cooperlake", 3) == NULL);
  CHECK(device_blas_better_kernels("SkylakeX", 2) == NULL);
  CHECK(device_blas_better_kernels("Prescott", 0) == NULL);
  CHECK(device_blas_better_kernels("NeoverseN1", 3) == NULL);
  CHECK(device_blas_better_kernels(NULL, 3) == NULL);
}

static void progress_line(void) {
  Progress p;
  progress_start(&p, "train", 1000);
  char line[256];
  progress_format(&p, 250, 812.34, 2.31415, 30.0, line, sizeof line);
  // 250 of 1000 steps in 30 s: 750 more take 90 s.
  CHECK_STR(line, "train: step 250/1000 (25%)  812.3 samples/s  loss 2.3142  eta 1m30s");
  p.total_steps = 0;
  progress_format(&p, 7, 1.0, -1, 1.0, line, sizeof line);
  CHECK_STR(line, "train: step 7  1.0 samples/s");
}

static void clocks(void) {
  double a = time_now_s();
  int64_t ms = time_unix_ms();
  CHECK(ms > 1700000000000LL);  // after 2023
  double b = time_now_s();
  CHECK(b >= a);
}

int main(void) {
  TEST_RUN(parse_cpu_and_auto);
  TEST_RUN(parse_errors_name_the_flag);
  TEST_RUN(cpu_memory);
  TEST_RUN(gpu_open_copy_time);
  TEST_RUN(gpu_copy_ordered_with_stream);
  TEST_RUN(blas_kernel_choice);
  TEST_RUN(progress_line);
  TEST_RUN(clocks);
  return test_finish();
}
