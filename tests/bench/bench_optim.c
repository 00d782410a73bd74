// bench_optim: one fused optimizer step (optim_step on the GPU) of each kind
// over the parameter table of BERT-large (about 335M fp32 parameters in 297
// tensors: Q, K and V fused into one QKV tensor per layer), in GB/s of the traffic a step must make, beside the device's
// measured copy bandwidth. tests/bench/bench_optim.py runs this program and
// PyTorch's fused optimizers on the same tensors (see tests/bench/README.md).
//
//   build/bench/bench_optim [--iters=20] [--warmup=5] [--json=PATH]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/rng.h"
#include "device/device.h"
#include "train/amp.h"
#include "train/optim.h"

enum { kVocab = 30522, kPositions = 512, kHidden = 1024, kFfn = 4096, kLayers = 24 };

// Per layer: QKV, attention output, two layer norms, FFN up and down.
static const struct {
  const char *name;
  int64_t rows, cols;  // cols 0: a vector
  unsigned flags;
} kLayerTensors[] = {
    {"qkv.w", 3 * kHidden, kHidden, 0},      {"qkv.b", 3 * kHidden, 0, PARAM_NO_DECAY},
    {"attn_out.w", kHidden, kHidden, 0},     {"attn_out.b", kHidden, 0, PARAM_NO_DECAY},
    {"ln1.gamma", kHidden, 0, PARAM_NO_DECAY}, {"ln1.beta", kHidden, 0, PARAM_NO_DECAY},
    {"ffn_up.w", kFfn, kHidden, 0},          {"ffn_up.b", kFfn, 0, PARAM_NO_DECAY},
    {"ffn_down.w", kHidden, kFfn, 0},        {"ffn_down.b", kHidden, 0, PARAM_NO_DECAY},
    {"ln2.gamma", kHidden, 0, PARAM_NO_DECAY}, {"ln2.beta", kHidden, 0, PARAM_NO_DECAY},
};
#define N_LAYER_TENSORS ((int)(sizeof kLayerTensors / sizeof kLayerTensors[0]))
#define MAX_TENSORS (5 + kLayers * N_LAYER_TENSORS + 4)

// fp32 words each kind reads and writes per parameter in one step: SGD reads
// w, g, buf and writes w, buf; LARS adds a pass reading w, g for the norms;
// Adam(W) reads w, g, m, v and writes w, m, v; LAMB's first pass reads w, g,
// m, v and writes m, v, its second reads w, m, v and writes w.
static const int kWordsPerParam[] = {[OPT_SGD] = 5, [OPT_LARS] = 7, [OPT_ADAM] = 7,
                                     [OPT_ADAMW] = 7, [OPT_LAMB] = 10};

static ParamSpec spec(char *name, int64_t rows, int64_t cols, unsigned flags) {
  ParamSpec s = {.name = name, .ndim = cols ? 2 : 1, .shape = {rows, cols}, .flags = flags};
  return s;
}

// BERT-large with a SQuAD head; names are allocated and live to the end.
static int bert_large_specs(ParamSpec *specs) {
  int n = 0;
  specs[n++] = spec(strdup("emb.word"), kVocab, kHidden, 0);
  specs[n++] = spec(strdup("emb.position"), kPositions, kHidden, 0);
  specs[n++] = spec(strdup("emb.token_type"), 2, kHidden, 0);
  specs[n++] = spec(strdup("emb.ln.gamma"), kHidden, 0, PARAM_NO_DECAY);
  specs[n++] = spec(strdup("emb.ln.beta"), kHidden, 0, PARAM_NO_DECAY);
  for (int l = 0; l < kLayers; l++)
    for (int t = 0; t < N_LAYER_TENSORS; t++) {
      char name[64];
      snprintf(name, sizeof name, "layer%d.%s", l, kLayerTensors[t].name);
      specs[n++] = spec(strdup(name), kLayerTensors[t].rows, kLayerTensors[t].cols,
                        kLayerTensors[t].flags);
    }
  specs[n++] = spec(strdup("pooler.w"), kHidden, kHidden, 0);
  specs[n++] = spec(strdup("pooler.b"), kHidden, 0, PARAM_NO_DECAY);
  specs[n++] = spec(strdup("qa.w"), 2, kHidden, 0);
  specs[n++] = spec(strdup("qa.b"), 2, 0, PARAM_NO_DECAY);
  return n;
}

static const ConfigKey kKeys[] = {
    {"iters", CFG_INT, "20", "timed steps of each optimizer", NULL},
    {"warmup", CFG_INT, "5", "untimed steps first", NULL},
    {"json", CFG_STRING, "", "also write the results to this JSON file", NULL},
};

// x = U(-bound, bound) on the GPU, from stream `stream` of seed 1.
static void fill_uniform(const Device *dev, float *x, int64_t n, uint64_t stream, float bound) {
#if HAVE_CUDA
  rng_fill_uniform_cuda(x, n, 1, stream, 0, -bound, bound, dev->stream);
#else
  (void)dev, (void)x, (void)n, (void)stream, (void)bound;
  DIE("bench_optim: a CUDA build is needed");
#endif
}

// Device-to-device copy of the whole parameter buffer: 2 bytes moved per byte.
static double copy_gbps(const Device *dev, ParamSet *ps, int warmup, int iters) {
  for (int i = 0; i < warmup; i++) amp_cast(dev, ps->params, ps->grads, DT_F32, ps->total_numel);
  DeviceTimer timer;
  device_timer_start(&timer, dev);
  for (int i = 0; i < iters; i++) amp_cast(dev, ps->params, ps->grads, DT_F32, ps->total_numel);
  double ms = device_timer_stop_ms(&timer) / iters;
  return 2.0 * (double)ps->total_numel * sizeof(float) / ms / 1e6;
}

static double step_ms(const Device *dev, ParamSet *ps, OptKind kind, int warmup, int iters) {
  OptConfig cfg = optim_defaults(kind);
  cfg.weight_decay = 0.01f;
  Optimizer opt;
  optim_init(&opt, &cfg, ps);
  // Tiny rates: the weights stay put over the repetitions.
  for (int i = 0; i < warmup; i++) optim_step(&opt, dev, ps, 1e-6f);
  DeviceTimer timer;
  device_timer_start(&timer, dev);
  for (int i = 0; i < iters; i++) optim_step(&opt, dev, ps, 1e-6f);
  double ms = device_timer_stop_ms(&timer) / iters;
  optim_free(&opt);
  return ms;
}

static void write_json_shapes(FILE *json, const ParamSet *ps) {
  fprintf(json, "  \"tensors\": [\n");
  for (int t = 0; t < ps->count; t++) {
    const ParamSpec *s = &ps->specs[t];
    fprintf(json, "    {\"name\": \"%s\", \"shape\": [%lld", s->name, (long long)s->shape[0]);
    if (s->ndim == 2) fprintf(json, ", %lld", (long long)s->shape[1]);
    fprintf(json, "], \"no_decay\": %s}%s\n", (s->flags & PARAM_NO_DECAY) ? "true" : "false",
            t + 1 < ps->count ? "," : "");
  }
  fprintf(json, "  ],\n");
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kKeys, (int)(sizeof kKeys / sizeof kKeys[0]));
  config_from_args(&cfg, argc, argv, "bench_optim");
  int iters = (int)config_int(&cfg, "iters"), warmup = (int)config_int(&cfg, "warmup");
  if (iters < 1) die_input("--iters", "must be at least 1");
  if (!HAVE_CUDA || !device_cuda_available()) {
    printf("SKIP bench_optim: no GPU\n");
    config_free(&cfg);
    return 0;
  }
  Device dev;
  device_open(&dev, DEVICE_CUDA, 0);
  char platform[256];
  device_describe(&dev, platform, sizeof platform);
  static ParamSpec specs[MAX_TENSORS];
  int count = bert_large_specs(specs);
  ParamSet ps;
  paramset_init(&ps, specs, count, 2, DEVICE_CUDA);
  fill_uniform(&dev, ps.params, ps.total_numel, 0, 0.05f);
  double copy = copy_gbps(&dev, &ps, warmup, iters);
  fill_uniform(&dev, ps.grads, ps.total_numel, 1, 1e-3f);
  int64_t n = paramset_count_params(&ps);
  const char *json_path = config_string(&cfg, "json");
  FILE *json = NULL;
  if (json_path[0]) CHECK_FILE(json = fopen(json_path, "w"), json_path);
  if (json) {
    fprintf(json, "{\"device\": \"%s\", \"params\": %lld, \"iters\": %d, \"copy_gbps\": %.1f,\n",
            platform, (long long)n, iters, copy);
    write_json_shapes(json, &ps);
    fprintf(json, "  \"optimizers\": [\n");
  }
  printf("%s: %lld parameters in %d tensors, %d iterations; copy %.1f GB/s\n", platform,
         (long long)n, count, iters, copy);
  printf("%-8s %9s %9s %9s %8s\n", "kind", "ms", "GB moved", "GB/s", "of copy");
  OptKind kinds[] = {OPT_SGD, OPT_LARS, OPT_ADAM, OPT_ADAMW, OPT_LAMB};
  for (int k = 0; k < 5; k++) {
    double ms = step_ms(&dev, &ps, kinds[k], warmup, iters);
    double gb = (double)kWordsPerParam[kinds[k]] * sizeof(float) * (double)n / 1e9;
    printf("%-8s %9.3f %9.2f %9.1f %7.0f%%\n", optim_kind_name(kinds[k]), ms, gb, gb / ms * 1e3,
           100.0 * gb / ms * 1e3 / copy);
    if (json)
      fprintf(json, "    {\"kind\": \"%s\", \"ms\": %.4f, \"gb\": %.4f, \"gbps\": %.1f}%s\n",
              optim_kind_name(kinds[k]), ms, gb, gb / ms * 1e3, k < 4 ? "," : "");
  }
  if (json) {
    fprintf(json, "  ]\n}\n");
    CHECK_FILE(fclose(json) == 0, json_path);
  }
  paramset_free(&ps);
  for (int t = 0; t < count; t++) free((char *)specs[t].name);
  device_close(&dev);
  config_free(&cfg);
  return 0;
}
