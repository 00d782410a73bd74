// bench_conv: the convolutions of a ResNet - forward, data gradient (dgrad)
// and filter gradient (wgrad) of each - timed through op_conv2d_*, in TFLOP/s.
//
//   --net=resnet50  the 53 convolutions of ResNet-50 v1.5 (224x224 input,
//                   bottlenecks 3,4,6,3, stride in the 3x3), default batch
//                   256, on the GPU in --dtype (default bf16), NHWC.
//   --net=small     the small config's ResNet-14 (image_classification/
//                   configs/small.conf: 32x32 RGB, 7x7/2 stem and max pool,
//                   basic blocks 2,2,2 of width 32), default batch 128; with
//                   --device=cpu it times the CPU path (oneDNN, or im2col +
//                   OpenBLAS in a DNNL=0 build) that small CPU training runs use.
//
// Identical shapes are timed once and counted as often as the net has them.
// tests/bench/bench_conv.py runs this program and PyTorch on the same shapes
// and prints both (see tests/bench/README.md).
//
//   build/bench/bench_conv [--net=resnet50] [--device=cuda] [--dtype=bf16]
//                          [--batch=256] [--iters=20] [--warmup=5] [--json=PATH]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/config.h"
#include "device/device.h"
#include "ops/conv.h"

typedef struct ConvLayer {
  char name[48];
  int64_t h, w, c, k, r;  // input extent, channels in and out, square kernel
  int stride, pad;
  int count;              // how many of the net's convolutions have this shape
} ConvLayer;

typedef struct Net {
  ConvLayer layers[64];
  int n_layers, n_convs;
} Net;

// Adds one convolution named after its stage and kind ("s2 3x3/2", "s3 proj/2").
static void net_add(Net *net, int stage, const char *kind, int64_t h, int64_t c, int64_t k,
                    int64_t r, int stride) {
  net->n_convs++;
  for (int i = 0; i < net->n_layers; i++) {
    ConvLayer *l = &net->layers[i];
    if (l->h == h && l->c == c && l->k == k && l->r == r && l->stride == stride) {
      l->count++;
      return;
    }
  }
  if (net->n_layers == (int)(sizeof net->layers / sizeof net->layers[0])) DIE("too many shapes");
  ConvLayer *l = &net->layers[net->n_layers++];
  *l = (ConvLayer){.h = h, .w = h, .c = c, .k = k, .r = r, .stride = stride,
                   .pad = (int)(r / 2), .count = 1};
  if (stage == 0)
    snprintf(l->name, sizeof l->name, "stem %s%s", kind, stride == 2 ? "/2" : "");
  else
    snprintf(l->name, sizeof l->name, "s%d %s%s", stage, kind, stride == 2 ? "/2" : "");
}

// A ResNet's convolutions in order, v1.5 style: a stage's first block
// downsamples (stride 2 after the first stage) in its 3x3 convolution and
// projects the shortcut with a strided 1x1 when the shape changes.
static Net net_resnet(bool bottleneck, const int *blocks, int stages, int64_t width,
                      int64_t image, int64_t in_c, bool stem_7x7) {
  Net net = {.n_layers = 0};
  int64_t h = image, c = width;
  if (stem_7x7) {
    net_add(&net, 0, "7x7", h, in_c, width, 7, 2);
    h /= 4;  // conv stride 2, then the 3x3/2 max pool
  } else {
    net_add(&net, 0, "3x3", h, in_c, width, 3, 1);
  }
  for (int s = 0; s < stages; s++) {
    int64_t mid = width << s, out = bottleneck ? 4 * mid : mid;
    for (int b = 0; b < blocks[s]; b++) {
      int stride = (b == 0 && s > 0) ? 2 : 1;
      if (bottleneck) {
        net_add(&net, s + 1, "1x1", h, c, mid, 1, 1);
        net_add(&net, s + 1, "3x3", h, mid, mid, 3, stride);
        net_add(&net, s + 1, "1x1", h / stride, mid, out, 1, 1);
      } else {
        net_add(&net, s + 1, "3x3", h, c, mid, 3, stride);
        net_add(&net, s + 1, "3x3", h / stride, mid, mid, 3, 1);
      }
      if (stride != 1 || c != out) net_add(&net, s + 1, "proj", h, c, out, 1, stride);
      h /= stride;
      c = out;
    }
  }
  return net;
}

static const ConfigKey kKeys[] = {
    {"net", CFG_STRING, "resnet50", "resnet50 | small (the small config's 32x32 ResNet-14)", NULL},
    {"device", CFG_STRING, "cuda", "cuda | cpu", "auto|cpu|cuda"},
    {"dtype", CFG_STRING, "bf16", "activation dtype on cuda: bf16 | fp16 | fp32 (cpu: fp32)", NULL},
    {"batch", CFG_INT, "0", "images per batch; 0: 256 for resnet50, 128 for small", NULL},
    {"iters", CFG_INT, "20", "timed repetitions of each convolution", NULL},
    {"warmup", CFG_INT, "5", "untimed repetitions first (the first also picks cuDNN's algorithm)", NULL},
    {"json", CFG_STRING, "", "also write the results to this JSON file", NULL},
};

typedef struct LayerTimes {
  double fwd_ms, dgrad_ms, wgrad_ms;
  double cpu_ms;  // process CPU time of one fwd + dgrad + wgrad, all threads
} LayerTimes;

enum { kFwd, kDgrad, kWgrad };

static void run_pass(const Device *dev, int pass, const Tensor *x, const Tensor *w,
                     const Tensor *y, const ConvParams *p, void *scratch, size_t scratch_bytes) {
  // dgrad reads y as dy and writes x as dx; wgrad writes w as dw.
  if (pass == kFwd) op_conv2d_fwd(dev, x, w, NULL, y, p, scratch, scratch_bytes);
  if (pass == kDgrad) op_conv2d_bwd_data(dev, y, w, x, p, scratch, scratch_bytes);
  if (pass == kWgrad) op_conv2d_bwd_filter(dev, x, y, w, p, false, scratch, scratch_bytes);
}

static LayerTimes time_layer(const Device *dev, const ConvLayer *l, int64_t batch, DType dtype,
                             int warmup, int iters) {
  ConvParams p = conv_params(l->stride, l->pad, 1);
  int64_t out = conv_out_extent(l->h, l->r, l->stride, l->pad, 1);
  Tensor x = TENSOR(NULL, dtype, dev->kind, batch, l->h, l->w, l->c);
  Tensor w = TENSOR(NULL, dtype, dev->kind, l->k, l->r, l->r, l->c);
  Tensor y = TENSOR(NULL, dtype, dev->kind, batch, out, out, l->k);
  Tensor *all[3] = {&x, &w, &y};
  for (int i = 0; i < 3; i++) {
    // Zeros: neither cuDNN's nor OpenBLAS's speed depends on the values.
    all[i]->data = device_alloc(dev->kind, tensor_bytes(all[i]));
    device_zero(dev->kind, all[i]->data, tensor_bytes(all[i]));
  }
  // CPU: im2col of up to 32 images per GEMM (what a trainer would size).
  size_t scratch_bytes = 0;
  void *scratch = NULL;
  if (dev->kind == DEVICE_CPU) {
    scratch_bytes = op_conv2d_scratch_bytes(&x, &w, &p) * (size_t)(batch < 32 ? batch : 32);
    scratch = malloc(scratch_bytes + 1);
  }
  double ms[3], cpu_s = 0;
  for (int pass = 0; pass < 3; pass++) {
    for (int i = 0; i < warmup; i++) run_pass(dev, pass, &x, &w, &y, &p, scratch, scratch_bytes);
    DeviceTimer timer;
    clock_t cpu_start = clock();
    device_timer_start(&timer, dev);
    for (int i = 0; i < iters; i++) run_pass(dev, pass, &x, &w, &y, &p, scratch, scratch_bytes);
    ms[pass] = device_timer_stop_ms(&timer) / iters;
    cpu_s += (double)(clock() - cpu_start) / CLOCKS_PER_SEC / iters;
  }
  free(scratch);
  for (int i = 0; i < 3; i++) device_free(dev->kind, all[i]->data);
  return (LayerTimes){ms[kFwd], ms[kDgrad], ms[kWgrad], cpu_s * 1e3};
}

static double layer_flop(const ConvLayer *l, int64_t batch) {
  int64_t out = conv_out_extent(l->h, l->r, l->stride, l->pad, 1);
  return 2.0 * (double)batch * (double)(out * out) * (double)(l->k * l->r * l->r * l->c);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, kKeys, (int)(sizeof kKeys / sizeof kKeys[0]));
  config_from_args(&cfg, argc, argv, "bench_conv");
  const char *net_name = config_string(&cfg, "net");
  bool small = strcmp(net_name, "small") == 0;
  if (!small && strcmp(net_name, "resnet50") != 0)
    die_input("--net", "'%s' is not resnet50 or small", net_name);
  if (strcmp(config_string(&cfg, "device"), "cuda") == 0 && !device_cuda_available()) {
    printf("SKIP bench_conv: no GPU\n");
    config_free(&cfg);
    return 0;
  }
  DeviceKind kind = device_kind_parse("--device", config_string(&cfg, "device"));
  int dtype = kind == DEVICE_CPU ? DT_F32 : dtype_parse(config_string(&cfg, "dtype"));
  if (dtype != DT_BF16 && dtype != DT_F16 && dtype != DT_F32)
    die_input("--dtype", "'%s' is not bf16, fp16 or fp32", config_string(&cfg, "dtype"));
  int64_t batch = config_int(&cfg, "batch");
  if (batch == 0) batch = small ? 128 : 256;
  int iters = (int)config_int(&cfg, "iters"), warmup = (int)config_int(&cfg, "warmup");
  if (iters < 1 || batch < 1) die_input("--iters/--batch", "must be at least 1");
  static const int kResnet50[] = {3, 4, 6, 3}, kSmall[] = {2, 2, 2};
  Net net = small ? net_resnet(false, kSmall, 3, 32, 32, 3, true)
                  : net_resnet(true, kResnet50, 4, 64, 224, 3, true);
  Device dev;
  device_open(&dev, kind, 0);
  char platform[256];
  device_describe(&dev, platform, sizeof platform);
  const char *json_path = config_string(&cfg, "json");
  FILE *json = NULL;
  if (json_path[0]) CHECK_FILE(json = fopen(json_path, "w"), json_path);
  if (json)
    fprintf(json,
            "{\"device\": \"%s\", \"net\": \"%s\", \"dtype\": \"%s\", \"batch\": %lld, "
            "\"iters\": %d, \"convs\": %d, \"layers\": [\n",
            platform, net_name, dtype_name((DType)dtype), (long long)batch, iters, net.n_convs);
  printf("%s: %d convolutions (%d shapes), batch %lld, %s NHWC, %s, %d iterations\n", net_name,
         net.n_convs, net.n_layers, (long long)batch, dtype_name((DType)dtype), platform, iters);
  printf("%-22s %4s %5s %5s %2s %2s %3s %9s %9s %9s %8s %8s %8s\n", "layer", "HW", "C", "K", "R",
         "s", "n", "fwd ms", "dgrad ms", "wgrad ms", "fwd TF/s", "dgr TF/s", "wgr TF/s");
  double total_ms = 0, total_flop = 0, total_cpu_ms = 0;
  for (int i = 0; i < net.n_layers; i++) {
    const ConvLayer *l = &net.layers[i];
    LayerTimes t = time_layer(&dev, l, batch, (DType)dtype, warmup, iters);
    double flop = layer_flop(l, batch);
    total_ms += l->count * (t.fwd_ms + t.dgrad_ms + t.wgrad_ms);
    total_flop += l->count * 3 * flop;
    total_cpu_ms += l->count * t.cpu_ms;
    printf("%-22s %4lld %5lld %5lld %2lld %2d %3d %9.3f %9.3f %9.3f %8.2f %8.2f %8.2f\n", l->name,
           (long long)l->h, (long long)l->c, (long long)l->k, (long long)l->r, l->stride, l->count,
           t.fwd_ms, t.dgrad_ms, t.wgrad_ms, flop / t.fwd_ms / 1e9, flop / t.dgrad_ms / 1e9,
           flop / t.wgrad_ms / 1e9);
    if (json)
      fprintf(json,
              "  {\"name\": \"%s\", \"h\": %lld, \"w\": %lld, \"c\": %lld, \"k\": %lld, "
              "\"r\": %lld, \"stride\": %d, \"pad\": %d, \"count\": %d, \"flop\": %.0f, "
              "\"fwd_ms\": %.6f, \"dgrad_ms\": %.6f, \"wgrad_ms\": %.6f}%s\n",
              l->name, (long long)l->h, (long long)l->w, (long long)l->c, (long long)l->k,
              (long long)l->r, l->stride, l->pad, l->count, flop, t.fwd_ms, t.dgrad_ms,
              t.wgrad_ms, i + 1 < net.n_layers ? "," : "");
  }
  printf("all %d convolutions, fwd + dgrad + wgrad: %.3f ms per batch, %.2f TFLOP/s, "
         "%.0f images/s\n",
         net.n_convs, total_ms, total_flop / total_ms / 1e9, (double)batch / total_ms * 1e3);
  // On a shared machine the wall time includes waiting for a core; the CPU
  // time is what the work itself took (over all BLAS threads).
  if (kind == DEVICE_CPU)
    printf("process CPU time: %.3f ms per batch (all threads)\n", total_cpu_ms);
  if (json) {
    fprintf(json, "], \"total_ms\": %.6f, \"total_flop\": %.0f}\n", total_ms, total_flop);
    CHECK_FILE(fclose(json) == 0, json_path);
  }
  device_close(&dev);
  config_free(&cfg);
  return 0;
}
