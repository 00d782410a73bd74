// bench_allreduce: the gradient all-reduce of the suite's distributed layer
// (train/dist.h: dist_grad_ready + dist_grad_wait on one bucket, which is
// MPI_Iallreduce and the averaging on CPU ranks, ncclAllReduce with ncclAvg
// on GPUs) timed over message sizes doubling from --min_bytes to
// --max_bytes, reported as nccl-tests report all-reduce:
//   algbw = bytes / time,  busbw = algbw * 2 (n - 1) / n
// (busbw is what each rank's link carries in a ring, comparable to the
// hardware's bandwidth whatever the rank count). The time is the mean of
// --iters all-reduces after --warmup, averaged over the ranks. Each size is
// then checked once: rank r holds (r + 1) * (1 + i % 251) at element i, so the
// average is (n + 1) / 2 * (1 + i % 251) everywhere.
//
//   mpirun -np 2 build/bench/bench_allreduce [--device=cpu|cuda|auto]
//       [--min_bytes=8] [--max_bytes=1073741824] [--iters=20] [--warmup=5]
//       [--json=PATH] [--fault=true]
// --fault adds 1 to one element on the last rank before each check, to show
// that the check catches a wrong sum (tests/bench/test_allreduce.sh).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "device/device.h"
#include "train/dist.h"

static const ConfigKey kKeys[] = {
    {"device", CFG_STRING, "auto", "cpu, cuda or auto (cuda when a GPU is present)", NULL},
    {"min_bytes", CFG_INT, "8", "smallest message (a multiple of 4 bytes)", "[4, inf)"},
    {"max_bytes", CFG_INT, "1073741824", "largest message (1 GiB)", "[4, inf)"},
    {"iters", CFG_INT, "20", "timed all-reduces of each size", "[1, inf)"},
    {"warmup", CFG_INT, "5", "untimed all-reduces first", "[0, inf)"},
    {"json", CFG_STRING, "", "also write the results to this JSON file", NULL},
    {"fault", CFG_BOOL, "false", "corrupt one element on the last rank before each check", NULL},
};

typedef struct Row {
  int64_t bytes;
  double us, algbw, busbw;
  int64_t wrong;  // elements off their expected average, over all ranks
} Row;

// One all-reduce of the view's single bucket, as a training step makes it.
static void allreduce(Dist *d) {
  dist_grad_ready(d, 0);
  dist_grad_wait(d);
}

static void fill(float *x, int64_t n, int rank) {
  for (int64_t i = 0; i < n; i++) x[i] = (float)(rank + 1) * (float)(1 + i % 251);
}

static int64_t count_wrong(const float *x, int64_t n, int size, int64_t *first) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < n; i++) {
    float want = 0.5f * (float)(size + 1) * (float)(1 + i % 251);
    if (fabsf(x[i] - want) > 1e-6f * want) {
      if (!wrong) *first = i;
      wrong++;
    }
  }
  return wrong;
}

static Row measure(Dist *d, const Device *dev, float *grads, float *host, int64_t bytes, int warmup,
                   int iters, bool fault) {
  int64_t n = bytes / (int64_t)sizeof(float);
  // The view: one tensor of n floats over the front of the buffer, one
  // bucket holding it.
  ParamSpec spec = {.name = "message", .ndim = 1, .shape = {n}};
  int64_t offset = 0;
  ParamSet view = {.count = 1, .specs = &spec, .offsets = &offset, .numels = &n, .total_numel = n,
                   .device = dev->kind, .grads = grads};
  dist_attach(d, dev, &view, (size_t)bytes);
  for (int i = 0; i < warmup; i++) allreduce(d);
  dist_barrier(d);
  device_sync(dev);
  DeviceTimer timer;
  device_timer_start(&timer, dev);
  for (int i = 0; i < iters; i++) allreduce(d);
  double us = device_timer_stop_ms(&timer) * 1e3 / iters;
  dist_sum_f64(d, &us, 1);
  us /= d->size;

  fill(host, n, d->rank);
  if (fault && d->rank == d->size - 1) host[n / 2] += 1.0f;
  if (host != grads) device_copy(dev->kind, grads, DEVICE_CPU, host, (size_t)bytes);
  allreduce(d);
  if (host != grads) device_copy(DEVICE_CPU, host, dev->kind, grads, (size_t)bytes);
  int64_t first = -1, wrong = count_wrong(host, n, d->size, &first);
  static bool reported;  // the first wrong size of each rank only
  if (wrong && !reported) {
    reported = true;
    fprintf(stderr, "bench_allreduce: rank %d, %lld bytes: %lld wrong sums, the first element %lld: "
            "%g, want %g\n", d->rank, (long long)bytes, (long long)wrong, (long long)first,
            host[first], 0.5 * (d->size + 1) * (1 + first % 251));
  }
  dist_sum_i64(d, &wrong, 1);
  dist_detach(d);

  double algbw = (double)bytes / (us * 1e-6) / 1e9;
  return (Row){bytes, us, algbw, algbw * 2.0 * (d->size - 1) / d->size, wrong};
}

static void write_json(const char *path, const char *platform, const Dist *d, int iters,
                       const Row *rows, int n_rows) {
  FILE *f;
  CHECK_FILE(f = fopen(path, "w"), path);
  fprintf(f, "{\"device\": \"%s\", \"ranks\": %d, \"iters\": %d, \"rows\": [\n", platform, d->size,
          iters);
  for (int i = 0; i < n_rows; i++)
    fprintf(f, "  {\"bytes\": %lld, \"time_us\": %.9g, \"algbw_gbps\": %.9g, \"busbw_gbps\": %.9g, "
            "\"wrong\": %lld}%s\n", (long long)rows[i].bytes, rows[i].us, rows[i].algbw,
            rows[i].busbw, (long long)rows[i].wrong, i + 1 < n_rows ? "," : "");
  fprintf(f, "]}\n");
  CHECK_FILE(fclose(f) == 0, path);
}

int main(int argc, char **argv) {
  Dist d;
  dist_init(&d, &argc, &argv);
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kKeys, (int)(sizeof kKeys / sizeof kKeys[0]));
  config_from_args(&cfg, argc, argv, "bench_allreduce");
  int64_t min_bytes = config_int(&cfg, "min_bytes"), max_bytes = config_int(&cfg, "max_bytes");
  int iters = (int)config_int(&cfg, "iters"), warmup = (int)config_int(&cfg, "warmup");
  if (min_bytes % 4 || max_bytes % 4) die_input("--min_bytes/--max_bytes", "must be multiples of 4 (fp32 elements)");
  if (max_bytes < min_bytes) die_input("--max_bytes", "is below --min_bytes");
  DeviceKind kind = device_kind_parse("--device", config_string(&cfg, "device"));
  Device dev;
  device_open(&dev, kind, kind == DEVICE_CUDA ? dist_device_index(&d) : 0);
  char platform[256];
  device_describe(&dev, platform, sizeof platform);

  float *grads = device_alloc(kind, (size_t)max_bytes);
  float *host = kind == DEVICE_CPU ? grads : xmalloc((size_t)max_bytes);
  if (d.rank == 0) {
    printf("bench_allreduce: %d rank%s on %s (%s), %d iterations after %d warm-up, sizes %lld to %lld "
           "bytes%s\n", d.size, d.size == 1 ? "" : "s", platform,
           kind == DEVICE_CUDA ? "NCCL" : d.mpi ? "MPI" : "no MPI", iters, warmup, (long long)min_bytes,
           (long long)max_bytes, d.size == 1 ? " (one rank: nothing to reduce, busbw 0)" : "");
    printf("%12s %12s %12s %12s %12s  %s\n", "bytes", "elements", "time_us", "algbw_GB/s",
           "busbw_GB/s", "check");
  }
  int n_rows = 0;
  Row rows[64];
  int64_t wrong = 0;
  for (int64_t bytes = min_bytes; bytes <= max_bytes && n_rows < 64; bytes *= 2) {
    Row r = measure(&d, &dev, grads, host, bytes, warmup, iters, config_bool(&cfg, "fault"));
    rows[n_rows++] = r;
    wrong += r.wrong;
    if (d.rank == 0) {
      printf("%12lld %12lld %12.2f %12.4f %12.4f  %s\n", (long long)r.bytes, (long long)(r.bytes / 4),
             r.us, r.algbw, r.busbw, r.wrong ? "WRONG" : "ok");
      fflush(stdout);
    }
  }
  const char *json = config_string(&cfg, "json");
  if (d.rank == 0 && json[0]) write_json(json, platform, &d, iters, rows, n_rows);
  if (d.rank == 0 && wrong)
    printf("bench_allreduce: %lld wrong sums over all sizes and ranks\n", (long long)wrong);
  if (host != grads) free(host);
  device_free(kind, grads);
  device_close(&dev);
  config_free(&cfg);
  dist_finalize(&d);
  return wrong ? 1 : 0;
}
