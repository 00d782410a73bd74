// bench_gemm: the GEMMs of one BERT-large encoder layer (batch 32 x sequence
// 384 tokens, hidden 1024, 16 heads of 64, FFN 4096) - forward and both
// backward products of each - timed through op_gemm on the GPU, in TFLOP/s.
// tests/bench/bench_gemm.py runs this program and PyTorch on the same shapes
// and prints them side by side (see tests/bench/README.md).
//
//   build/bench/bench_gemm [--dtype=bf16] [--iters=50] [--warmup=10] [--json=PATH]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "device/device.h"
#include "ops/dense.h"

enum { kBatch = 32, kSeq = 384, kHidden = 1024, kHeads = 16, kHeadDim = 64, kFfn = 4096 };
enum { kTokens = kBatch * kSeq };

// c (batch, m, n) = op(a) op(b); a is (m, k) or (k, m) when trans_a, b is
// (k, n) or (n, k) when trans_b.
typedef struct GemmCase {
  const char *name;
  int64_t m, n, k, batch;
  bool trans_a, trans_b;
} GemmCase;

// A linear layer y = x W^T (x: tokens x in, W: out x in) gives three GEMMs:
// forward, dx = dy W (dgrad) and dW = dy^T x (wgrad).
#define LINEAR(name, out, in)                               \
  {name " fwd", kTokens, out, in, 1, false, true},          \
      {name " dgrad", kTokens, in, out, 1, false, false}, { \
    name " wgrad", out, in, kTokens, 1, true, false         \
  }

static const GemmCase kCases[] = {
    LINEAR("qkv proj", 3 * kHidden, kHidden),
    // Attention, one product per (sequence, head): S = Q K^T, then
    // dQ = dS K and dK = dS^T Q; O = P V, then dP = dO V^T and dV = P^T dO.
    {"attn scores fwd", kSeq, kSeq, kHeadDim, kBatch *kHeads, false, true},
    {"attn scores dQ", kSeq, kHeadDim, kSeq, kBatch *kHeads, false, false},
    {"attn scores dK", kSeq, kHeadDim, kSeq, kBatch *kHeads, true, false},
    {"attn context fwd", kSeq, kHeadDim, kSeq, kBatch *kHeads, false, false},
    {"attn context dP", kSeq, kSeq, kHeadDim, kBatch *kHeads, false, true},
    {"attn context dV", kSeq, kHeadDim, kSeq, kBatch *kHeads, true, false},
    LINEAR("attn out proj", kHidden, kHidden),
    LINEAR("ffn up", kFfn, kHidden),
    LINEAR("ffn down", kHidden, kFfn),
};
#define N_CASES ((int)(sizeof kCases / sizeof kCases[0]))

static const ConfigKey kKeys[] = {
    {"dtype", CFG_STRING, "bf16", "input dtype: bf16 | fp16 | fp32 (fp32 runs TF32)", NULL},
    {"iters", CFG_INT, "50", "timed repetitions of each GEMM", NULL},
    {"warmup", CFG_INT, "10", "untimed repetitions first", NULL},
    {"json", CFG_STRING, "", "also write the results to this JSON file", NULL},
};

// Mean milliseconds of one GEMM over iters runs.
static double time_case(const Device *dev, const GemmCase *g, DType dtype, int warmup,
                        int iters) {
  int64_t a_rows = g->trans_a ? g->k : g->m, a_cols = g->trans_a ? g->m : g->k;
  int64_t b_rows = g->trans_b ? g->n : g->k, b_cols = g->trans_b ? g->k : g->n;
  Tensor a = TENSOR(NULL, dtype, DEVICE_CUDA, g->batch, a_rows, a_cols);
  Tensor b = TENSOR(NULL, dtype, DEVICE_CUDA, g->batch, b_rows, b_cols);
  Tensor c = TENSOR(NULL, dtype, DEVICE_CUDA, g->batch, g->m, g->n);
  Tensor *all[3] = {&a, &b, &c};
  for (int i = 0; i < 3; i++) {
    // Zeros: the timing of a tensor-core GEMM does not depend on the values.
    all[i]->data = device_alloc(DEVICE_CUDA, tensor_bytes(all[i]));
    device_zero(DEVICE_CUDA, all[i]->data, tensor_bytes(all[i]));
  }
  for (int i = 0; i < warmup; i++) op_gemm(dev, &a, g->trans_a, &b, g->trans_b, &c, 1, 0);
  DeviceTimer timer;
  device_timer_start(&timer, dev);
  for (int i = 0; i < iters; i++) op_gemm(dev, &a, g->trans_a, &b, g->trans_b, &c, 1, 0);
  double ms = device_timer_stop_ms(&timer) / iters;
  for (int i = 0; i < 3; i++) device_free(DEVICE_CUDA, all[i]->data);
  return ms;
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kKeys, (int)(sizeof kKeys / sizeof kKeys[0]));
  config_from_args(&cfg, argc, argv, "bench_gemm");
  int dtype = dtype_parse(config_string(&cfg, "dtype"));
  if (dtype != DT_BF16 && dtype != DT_F16 && dtype != DT_F32)
    die_input("--dtype", "'%s' is not bf16, fp16 or fp32", config_string(&cfg, "dtype"));
  int iters = (int)config_int(&cfg, "iters"), warmup = (int)config_int(&cfg, "warmup");
  if (iters < 1) die_input("--iters", "must be at least 1");
  if (!device_cuda_available()) {
    printf("SKIP bench_gemm: no GPU\n");
    config_free(&cfg);
    return 0;
  }
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  op_gemm_set_tf32(&dev, dtype == DT_F32);
  char platform[256];
  device_describe(&dev, platform, sizeof platform);
  const char *json_path = config_string(&cfg, "json");
  FILE *json = NULL;
  if (json_path[0]) CHECK_FILE(json = fopen(json_path, "w"), json_path);
  if (json)
    fprintf(json, "{\"device\": \"%s\", \"dtype\": \"%s\", \"iters\": %d, \"gemms\": [\n",
            platform, dtype_name((DType)dtype), iters);
  printf("%s, %s, %d iterations\n", platform, dtype_name((DType)dtype), iters);
  printf("%-18s %6s %6s %6s %6s %2s %2s %9s %9s\n", "gemm", "m", "n", "k", "batch", "ta",
         "tb", "ms", "TFLOP/s");
  double total_ms = 0, total_flop = 0;
  for (int i = 0; i < N_CASES; i++) {
    const GemmCase *g = &kCases[i];
    double ms = time_case(&dev, g, (DType)dtype, warmup, iters);
    double flop = 2.0 * (double)g->m * g->n * g->k * g->batch;
    total_ms += ms;
    total_flop += flop;
    printf("%-18s %6lld %6lld %6lld %6lld %2d %2d %9.3f %9.1f\n", g->name,
           (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch,
           g->trans_a, g->trans_b, ms, flop / ms / 1e9);
    if (json)
      fprintf(
          json,
          "  {\"name\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"batch\": %lld, "
          "\"trans_a\": %s, \"trans_b\": %s, \"ms\": %.6f, \"tflops\": %.3f}%s\n",
          g->name, (long long)g->m, (long long)g->n, (long long)g->k, (long long)g->batch,
          g->trans_a ? "true" : "false", g->trans_b ? "true" : "false", ms,
          flop / ms / 1e9, i + 1 < N_CASES ? "," : "");
  }
  printf("%-18s %34s %9.3f %9.1f\n", "layer total", "", total_ms,
         total_flop / total_ms / 1e9);
  if (json) {
    fprintf(json, "]}\n");
    CHECK_FILE(fclose(json) == 0, json_path);
  }
  device_close(&dev);
  config_free(&cfg);
  return 0;
}
