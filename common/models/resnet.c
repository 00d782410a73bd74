// resnet.c: ResNet forward and backward over the op library.
#include "models/resnet.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "train/amp.h"

ResnetConfig resnet_config_50(void) {
  ResnetConfig c = {
      .block = RESNET_BOTTLENECK, .stages = 4, .blocks = {3, 4, 6, 3}, .width = 64,
      .in_channels = 3, .image_size = 224, .stem_7x7 = true, .num_classes = 1000,
      .zero_init_residual = true, .conv_init = {.scale = 2.0f, .fan_in = false, .truncated = false},
      .bn_momentum = 0.1f, .bn_eps = 1e-5f,
  };
  return c;
}

bool resnet_parse_stages(ResnetConfig *cfg, const char *text) {
  int n = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 1 || v > 64 || n == RESNET_MAX_STAGES) return false;
    cfg->blocks[n++] = (int)v;
    p = end;
    if (*p == ',') p++;
    else if (*p) return false;
  }
  cfg->stages = n;
  return n > 0;
}

// ------------------------------------------------------------ construction
// Construction walks the architecture twice with the same code: once to
// count parameters, buffers, BN channels and the largest activation, once to
// fill.

typedef struct Builder {
  Resnet *net;
  bool fill;               // second pass: write specs and tensors
  int n_params, n_buffers;
  int64_t bn_channels;     // saved statistics, 2 floats per channel
  int64_t max_act;         // elements per image of the largest activation
  size_t scratch_bytes;
  size_t name_bytes;
} Builder;

// A row of the parameter table, or of the buffer table (untrained state).
static int add_spec(Builder *b, bool buffer, const char *name, int ndim, const int64_t *shape,
                    unsigned flags) {
  int i = buffer ? b->n_buffers++ : b->n_params++;
  size_t len = strlen(name) + 1;
  if (b->fill) {
    ParamSpec *s = buffer ? &b->net->buffer_specs[i] : &b->net->specs[i];
    s->name = memcpy(b->net->names + b->name_bytes, name, len);
    s->ndim = ndim;
    for (int d = 0; d < ndim; d++) s->shape[d] = shape[d];
    s->flags = flags;
  }
  b->name_bytes += len;
  return i;
}

static int add_param(Builder *b, const char *name, int ndim, const int64_t *shape,
                     unsigned flags) {
  return add_spec(b, false, name, ndim, shape, flags);
}

static Tensor alloc_act(Builder *b, int64_t h, int64_t w, int64_t c) {
  int64_t per_image = h * w * c;
  if (per_image > b->max_act) b->max_act = per_image;
  if (!b->fill) return (Tensor){0};
  Resnet *net = b->net;
  DType dt = net->cfg.dtype;
  return tensor_make(device_alloc(net->device, (size_t)(net->max_batch * per_image) * dtype_size(dt)),
                     dt, net->device, 4, (int64_t[]){net->max_batch, h, w, c});
}

static void add_conv_bn(Builder *b, ResnetConvBn *u, const char *prefix, int64_t in_h,
                        int64_t in_w, int64_t in_c, int64_t out_c, int kernel, int stride,
                        bool relu) {
  char name[128];
  memset(u, 0, sizeof *u);
  u->in_c = in_c;
  u->out_c = out_c;
  u->kernel = kernel;
  u->relu = relu;
  u->conv = (ConvParams){stride, stride, kernel / 2, kernel / 2, 1, 1};
  u->out_h = conv_out_extent(in_h, kernel, stride, kernel / 2, 1);
  u->out_w = conv_out_extent(in_w, kernel, stride, kernel / 2, 1);
  snprintf(name, sizeof name, "%s.conv.weight", prefix);
  u->w = add_param(b, name, 4, (int64_t[]){out_c, kernel, kernel, in_c}, 0);
  snprintf(name, sizeof name, "%s.bn.weight", prefix);
  u->gamma = add_param(b, name, 1, (int64_t[]){out_c}, PARAM_NO_DECAY);
  snprintf(name, sizeof name, "%s.bn.bias", prefix);
  u->beta = add_param(b, name, 1, (int64_t[]){out_c}, PARAM_NO_DECAY);
  snprintf(name, sizeof name, "%s.bn.running_mean", prefix);
  u->running_mean = add_spec(b, true, name, 1, (int64_t[]){out_c}, 0);
  snprintf(name, sizeof name, "%s.bn.running_var", prefix);
  u->running_var = add_spec(b, true, name, 1, (int64_t[]){out_c}, 0);
  u->conv_out = alloc_act(b, u->out_h, u->out_w, out_c);
  u->y = alloc_act(b, u->out_h, u->out_w, out_c);
  // Scratch is per image: the CPU convolution works image by image at least.
  Tensor x1 = tensor_make(NULL, DT_F32, DEVICE_CPU, 4, (int64_t[]){1, in_h, in_w, in_c});
  Tensor w1 = tensor_make(NULL, DT_F32, DEVICE_CPU, 4, (int64_t[]){out_c, kernel, kernel, in_c});
  size_t need = op_conv2d_scratch_bytes(&x1, &w1, &u->conv);
  if (need > b->scratch_bytes) b->scratch_bytes = need;
  if (b->fill) {
    float *saved = b->net->bn_saved + 2 * b->bn_channels;
    BatchNorm *bn = &u->bn;
    bn->save_mean = tensor_make(saved, DT_F32, b->net->device, 1, (int64_t[]){out_c});
    bn->save_invstd = tensor_make(saved + out_c, DT_F32, b->net->device, 1, (int64_t[]){out_c});
    bn->momentum = b->net->cfg.bn_momentum;
    bn->eps = b->net->cfg.bn_eps;
  }
  b->bn_channels += out_c;
}

// One residual block; returns its output channels and updates *h, *w.
static int64_t add_block(Builder *b, ResnetBlock *blk, const char *prefix, int64_t *h,
                         int64_t *w, int64_t in_c, int64_t width, int stride) {
  const ResnetConfig *cfg = &b->net->cfg;
  char name[128];
  memset(blk, 0, sizeof *blk);
  int64_t out_c;
  if (cfg->block == RESNET_BOTTLENECK) {
    out_c = width * 4;
    blk->n_conv = 3;
    snprintf(name, sizeof name, "%s.a", prefix);
    add_conv_bn(b, &blk->conv[0], name, *h, *w, in_c, width, 1, 1, true);
    snprintf(name, sizeof name, "%s.b", prefix);  // v1.5: the stride sits here
    add_conv_bn(b, &blk->conv[1], name, *h, *w, width, width, 3, stride, true);
    int64_t oh = blk->conv[1].out_h, ow = blk->conv[1].out_w;
    snprintf(name, sizeof name, "%s.c", prefix);
    add_conv_bn(b, &blk->conv[2], name, oh, ow, width, out_c, 1, 1, true);
  } else {
    out_c = width;
    blk->n_conv = 2;
    snprintf(name, sizeof name, "%s.a", prefix);
    add_conv_bn(b, &blk->conv[0], name, *h, *w, in_c, width, 3, stride, true);
    int64_t oh = blk->conv[0].out_h, ow = blk->conv[0].out_w;
    snprintf(name, sizeof name, "%s.b", prefix);
    add_conv_bn(b, &blk->conv[1], name, oh, ow, width, out_c, 3, 1, true);
  }
  // The last BN of the residual branch may start at gamma 0, so that every
  // block starts as the identity.
  blk->conv[blk->n_conv - 1].zero_gamma = cfg->zero_init_residual;
  blk->has_proj = stride != 1 || in_c != out_c;
  if (blk->has_proj) {
    snprintf(name, sizeof name, "%s.proj", prefix);
    add_conv_bn(b, &blk->proj, name, *h, *w, in_c, out_c, 1, stride, false);
  }
  const ResnetConvBn *last = &blk->conv[blk->n_conv - 1];
  *h = last->out_h;
  *w = last->out_w;
  return out_c;
}

static void build(Builder *b) {
  Resnet *net = b->net;
  const ResnetConfig *cfg = &net->cfg;
  int64_t h = cfg->image_size, w = cfg->image_size;
  if (cfg->stem_7x7) {
    add_conv_bn(b, &net->stem, "stem", h, w, cfg->in_channels, cfg->width, 7, 2, true);
    net->stem_pool = (PoolParams){3, 3, 2, 2, 1, 1};
    h = conv_out_extent(net->stem.out_h, 3, 2, 1, 1);
    w = conv_out_extent(net->stem.out_w, 3, 2, 1, 1);
    net->stem_pooled = alloc_act(b, h, w, cfg->width);
  } else {
    add_conv_bn(b, &net->stem, "stem", h, w, cfg->in_channels, cfg->width, 3, 1, true);
    h = net->stem.out_h;
    w = net->stem.out_w;
  }
  int64_t c = cfg->width;
  int k = 0;
  for (int s = 0; s < cfg->stages; s++) {
    for (int i = 0; i < cfg->blocks[s]; i++, k++) {
      char prefix[64];
      snprintf(prefix, sizeof prefix, "layer%d.%d", s + 1, i);
      int first = cfg->stage_stride[s] > 0 ? cfg->stage_stride[s] : (s > 0 ? 2 : 1);
      int stride = i == 0 ? first : 1;
      c = add_block(b, &net->blocks[k], prefix, &h, &w, c, (int64_t)cfg->width << s, stride);
    }
  }
  net->out_channels = c;
  if (cfg->num_classes > 0) {
    net->fc_w = add_param(b, "fc.weight", 2, (int64_t[]){cfg->num_classes, c}, 0);
    net->fc_b = add_param(b, "fc.bias", 1, (int64_t[]){cfg->num_classes}, PARAM_NO_DECAY);
  }
}

// Every conv+BN unit of the network, in forward order; returns the count.
static int collect_units(Resnet *net, ResnetConvBn **units) {
  int n = 0;
  units[n++] = &net->stem;
  for (int k = 0; k < net->n_blocks; k++) {
    ResnetBlock *blk = &net->blocks[k];
    for (int j = 0; j < blk->n_conv; j++) units[n++] = &blk->conv[j];
    if (blk->has_proj) units[n++] = &blk->proj;
  }
  return n;
}

static ResnetConvBn **all_units(Resnet *net, int *count) {
  ResnetConvBn **units = xcalloc((size_t)(1 + 4 * net->n_blocks), sizeof *units);
  *count = collect_units(net, units);
  return units;
}

double resnet_truncated_normal_std(double bound) {
  double density = exp(-bound * bound / 2) / sqrt(2 * M_PI), mass = erf(bound / sqrt(2.0));
  return sqrt(1 - 2 * bound * density / mass);
}

// A convolution's weights (n of them) as conv_init says, for a fan of `fan`.
// A truncated draw outside the bounds is replaced by the stream's number
// i + n, then i + 2n, ... until one falls inside: the same values whatever
// the others drew.
static void init_conv_weights(float *w, int64_t n, int64_t fan, const ResnetConvInit *init,
                              uint64_t seed, uint64_t stream) {
  float std = sqrtf(init->scale / (float)fan);
  if (!init->truncated) {
    rng_fill_normal_cpu(w, n, seed, stream, 0, 0.0f, std);
    return;
  }
  const float bound = 2.0f;
  float sigma = (float)(std / resnet_truncated_normal_std(bound));
  for (int64_t i = 0; i < n; i++) {
    float z = rng_normal(seed, stream, (uint64_t)i);
    for (uint64_t k = 1; fabsf(z) > bound; k++) z = rng_normal(seed, stream, (uint64_t)i + k * (uint64_t)n);
    w[i] = sigma * z;
  }
}

// Initial parameters and BN statistics, made on the host and copied once;
// binds each BN's running statistics to its rows of the buffer table.
static void init_values(Resnet *net, uint64_t seed) {
  ParamSet *ps = &net->params, *bs = &net->buffers;
  float *params = xcalloc((size_t)ps->total_numel, sizeof(float));
  float *stats = xcalloc((size_t)bs->total_numel, sizeof(float));
  int n_units;
  ResnetConvBn **units = all_units(net, &n_units);
  for (int u = 0; u < n_units; u++) {
    ResnetConvBn *c = units[u];
    c->bn.running_mean = paramset_param(bs, c->running_mean);
    c->bn.running_var = paramset_param(bs, c->running_var);
    int64_t fan = (net->cfg.conv_init.fan_in ? c->in_c : c->out_c) * c->kernel * c->kernel;
    init_conv_weights(params + ps->offsets[c->w], ps->numels[c->w], fan, &net->cfg.conv_init, seed,
                      (uint64_t)c->w);
    float *gamma = params + ps->offsets[c->gamma];
    float *var = stats + bs->offsets[c->running_var];
    for (int64_t j = 0; j < c->out_c; j++) {
      gamma[j] = c->zero_gamma ? 0.0f : 1.0f;
      var[j] = 1.0f;
    }
  }
  if (net->cfg.num_classes > 0)
    rng_fill_normal_cpu(params + ps->offsets[net->fc_w], ps->numels[net->fc_w], seed,
                        (uint64_t)net->fc_w, 0, 0.0f, 0.01f);
  device_copy(net->device, ps->params, DEVICE_CPU, params, (size_t)ps->total_numel * sizeof(float));
  device_copy(net->device, bs->params, DEVICE_CPU, stats, (size_t)bs->total_numel * sizeof(float));
  free(units);
  free(params);
  free(stats);
}

void resnet_init(Resnet *net, const ResnetConfig *cfg, int64_t max_batch, int n_state,
                 DeviceKind device, uint64_t seed) {
  memset(net, 0, sizeof *net);
  if (cfg->dtype != DT_F32 && cfg->dtype != DT_F16 && cfg->dtype != DT_BF16)
    DIE("resnet_init: compute dtype %s is not fp32, fp16 or bf16", dtype_name(cfg->dtype));
  if (cfg->dtype != DT_F32 && device != DEVICE_CUDA)
    DIE("resnet_init: %s compute needs a CUDA device; the CPU path computes in fp32",
        dtype_name(cfg->dtype));
  net->cfg = *cfg;
  net->device = device;
  net->max_batch = max_batch;
  for (int s = 0; s < cfg->stages; s++) net->n_blocks += cfg->blocks[s];
  net->blocks = xcalloc((size_t)net->n_blocks, sizeof(ResnetBlock));

  Builder count = {.net = net};
  build(&count);
  net->specs = xcalloc((size_t)count.n_params, sizeof(ParamSpec));
  net->buffer_specs = xcalloc((size_t)count.n_buffers, sizeof(ParamSpec));
  net->names = xmalloc(count.name_bytes);
  net->bn_saved = device_alloc(device, (size_t)(2 * count.bn_channels) * sizeof(float));
  Builder fill = {.net = net, .fill = true};
  build(&fill);
  net->n_params = fill.n_params;

  paramset_init(&net->params, net->specs, net->n_params, n_state, device);
  paramset_init(&net->buffers, net->buffer_specs, fill.n_buffers, 0, device);
  init_values(net, seed);

  DType dt = cfg->dtype;
  size_t dsize = dtype_size(dt);
  int64_t act = max_batch * fill.max_act;
  for (int g = 0; g < 4; g++)
    net->grad[g] = tensor_make(device_alloc(device, (size_t)act * dsize), dt, device, 1,
                               (int64_t[]){act});
  int64_t c = net->out_channels;
  if (cfg->num_classes > 0) {
    int64_t nc = cfg->num_classes;
    net->features = tensor_make(device_alloc(device, (size_t)(max_batch * c) * dsize), dt, device,
                                2, (int64_t[]){max_batch, c});
    net->dfeatures = tensor_make(device_alloc(device, (size_t)(max_batch * c) * dsize), dt,
                                 device, 2, (int64_t[]){max_batch, c});
    net->logits = tensor_make(device_alloc(device, (size_t)(max_batch * nc) * sizeof(float)),
                              DT_F32, device, 2, (int64_t[]){max_batch, nc});
    if (dt != DT_F32)
      net->dlogits_lowp = tensor_make(device_alloc(device, (size_t)(max_batch * nc) * dsize), dt,
                                      device, 2, (int64_t[]){max_batch, nc});
  }
  if (dt != DT_F32) {
    size_t bytes = (size_t)net->params.total_numel * dsize;
    net->lowp_weights = device_alloc(device, bytes);
    net->lowp_grads = device_alloc(device, bytes);
  }
  // A bigger CPU scratch lets the convolution batch several images per GEMM.
  if (device == DEVICE_CPU) {
    net->scratch_bytes = fill.scratch_bytes * 4;
    net->scratch = xmalloc(net->scratch_bytes);
  }
}

void resnet_share_params(Resnet *net, const ParamSet *outer) {
  ParamSet *ps = &net->params;
  if (ps->n_state != 0) DIE("resnet_share_params: the network has its own optimizer state");
  if (outer->device != net->device || outer->count < ps->count)
    DIE("resnet_share_params: the table does not hold the network's %d tensors", ps->count);
  for (int i = 0; i < ps->count; i++)
    if (strcmp(outer->specs[i].name, ps->specs[i].name) != 0 || outer->offsets[i] != ps->offsets[i] ||
        outer->numels[i] != ps->numels[i])
      DIE("resnet_share_params: tensor %d of the table is %s, not %s", i, outer->specs[i].name,
          ps->specs[i].name);
  size_t bytes = (size_t)ps->total_numel * sizeof(float);
  device_copy(net->device, outer->params, net->device, ps->params, bytes);
  device_copy(net->device, outer->grads, net->device, ps->grads, bytes);
  if (!net->params_shared) {
    device_free(net->device, ps->params);
    device_free(net->device, ps->grads);
  }
  ps->params = outer->params;
  ps->grads = outer->grads;
  net->params_shared = true;
}

static void free_unit(ResnetConvBn *u, DeviceKind device) {
  device_free(device, u->conv_out.data);
  device_free(device, u->y.data);
}

void resnet_free(Resnet *net) {
  int n_units;
  ResnetConvBn **units = all_units(net, &n_units);
  for (int u = 0; u < n_units; u++) free_unit(units[u], net->device);
  free(units);
  device_free(net->device, net->stem_pooled.data);
  for (int g = 0; g < 4; g++) device_free(net->device, net->grad[g].data);
  device_free(net->device, net->features.data);
  device_free(net->device, net->dfeatures.data);
  device_free(net->device, net->logits.data);
  device_free(net->device, net->dlogits_lowp.data);
  device_free(net->device, net->lowp_weights);
  device_free(net->device, net->lowp_grads);
  device_free(net->device, net->bn_saved);
  if (net->params_shared) net->params.params = net->params.grads = NULL;
  paramset_free(&net->params);
  paramset_free(&net->buffers);
  free(net->scratch);
  free(net->blocks);
  free(net->specs);
  free(net->buffer_specs);
  free(net->names);
  memset(net, 0, sizeof *net);
}

// ------------------------------------------------------------ forward

// Backward buffer g viewed with the shape of activation `like`.
static Tensor grad_view(const Resnet *net, int g, const Tensor *like) {
  return tensor_make(net->grad[g].data, net->cfg.dtype, net->device, like->ndim, like->shape);
}

static bool low_precision(const Resnet *net) { return net->cfg.dtype != DT_F32; }

// Weight i as the convolutions and the classifier read it: the fp32
// parameter, or its low-precision copy.
static Tensor weight(const Resnet *net, int i) {
  if (low_precision(net)) return amp_weight_view(&net->params, net->lowp_weights, net->cfg.dtype, 0, i);
  return paramset_param(&net->params, i);
}

static void bind_bn(const Resnet *net, ResnetConvBn *u) {
  u->bn.gamma = paramset_param(&net->params, u->gamma);
  u->bn.beta = paramset_param(&net->params, u->beta);
}

// y = act(BN(conv(x)) [+ z])
static const Tensor *conv_bn_fwd(Resnet *net, const Device *dev, ResnetConvBn *u, const Tensor *x,
                                 const Tensor *z, bool train) {
  int64_t n = x->shape[0];
  u->x = *x;
  u->conv_out = tensor_rows(&u->conv_out, 0, n);
  u->y = tensor_rows(&u->y, 0, n);
  Tensor w = weight(net, u->w);
  op_conv2d_fwd(dev, x, &w, NULL, &u->conv_out, &u->conv, net->scratch, net->scratch_bytes);
  bind_bn(net, u);
  if (train)
    op_batchnorm_fwd_train(dev, &u->bn, &u->conv_out, z, u->relu, &u->y);
  else
    op_batchnorm_fwd_infer(dev, &u->bn, &u->conv_out, z, u->relu, &u->y);
  return &u->y;
}

static const Tensor *block_fwd(Resnet *net, const Device *dev, ResnetBlock *blk, const Tensor *x,
                               bool train) {
  const Tensor *shortcut = x;
  if (blk->has_proj) shortcut = conv_bn_fwd(net, dev, &blk->proj, x, NULL, train);
  const Tensor *h = x;
  for (int j = 0; j < blk->n_conv - 1; j++) h = conv_bn_fwd(net, dev, &blk->conv[j], h, NULL, train);
  return conv_bn_fwd(net, dev, &blk->conv[blk->n_conv - 1], h, shortcut, train);
}

const Tensor *resnet_forward(Resnet *net, const Device *dev, const Tensor *x, bool train) {
  int64_t n = x->shape[0];
  if (n > net->max_batch) DIE("resnet_forward: batch %lld over the %lld allocated", (long long)n,
                              (long long)net->max_batch);
  if (x->dtype != net->cfg.dtype)
    DIE("resnet_forward: input is %s, the network computes in %s", dtype_name(x->dtype),
        dtype_name(net->cfg.dtype));
  if (low_precision(net))
    PROFILE_REGION(dev, "amp weight cast", {
      amp_cast(dev, net->params.params, net->lowp_weights, net->cfg.dtype, net->params.total_numel);
    });
  const Tensor *h = conv_bn_fwd(net, dev, &net->stem, x, NULL, train);
  if (net->cfg.stem_7x7) {
    net->stem_pooled = tensor_rows(&net->stem_pooled, 0, n);
    op_maxpool_fwd(dev, h, &net->stem_pooled, &net->stem_pool);
    h = &net->stem_pooled;
  }
  for (int k = 0; k < net->n_blocks; k++) h = block_fwd(net, dev, &net->blocks[k], h, train);
  net->out = h;
  if (net->cfg.num_classes == 0) return h;
  net->features = tensor_rows(&net->features, 0, n);
  net->logits = tensor_rows(&net->logits, 0, n);
  op_global_avgpool_fwd(dev, h, &net->features);
  Tensor fw = weight(net, net->fc_w), fb = paramset_param(&net->params, net->fc_b);
  op_linear_fwd(dev, &net->features, &fw, &fb, &net->logits);
  return &net->logits;
}

// ------------------------------------------------------------ backward

// Parameter tensor i's gradient is final.
static void announce(const Resnet *net, int i) {
  if (net->hook.ready) net->hook.ready(net->hook.ctx, i);
}

// From dy (the gradient of u->y) in grad[gy]: the BN and conv gradients,
// dz into grad[gz] when u had a residual input (gz >= 0), and the gradient
// of u->x into grad[gx] (gx < 0: not needed, the network input).
static void conv_bn_bwd(Resnet *net, const Device *dev, ResnetConvBn *u, int gy, int gz, int gx,
                        int gtmp) {
  Tensor dy = grad_view(net, gy, &u->y);
  Tensor dconv = grad_view(net, gtmp, &u->conv_out);
  Tensor dz = gz >= 0 ? grad_view(net, gz, &u->y) : (Tensor){0};
  Tensor dgamma = paramset_grad(&net->params, u->gamma), dbeta = paramset_grad(&net->params, u->beta);
  bind_bn(net, u);
  op_batchnorm_bwd(dev, &u->bn, &u->conv_out, &u->y, &dy, u->relu, &dconv, gz >= 0 ? &dz : NULL,
                   &dgamma, &dbeta, true);
  announce(net, u->gamma);
  announce(net, u->beta);
  // Low precision: the filter gradient in the compute dtype, overwritten
  // (each weight has one convolution), then added into the fp32 gradient.
  Tensor w = weight(net, u->w);
  bool lowp = low_precision(net);
  Tensor dw = lowp ? amp_weight_view(&net->params, net->lowp_grads, net->cfg.dtype, 0, u->w)
                   : paramset_grad(&net->params, u->w);
  op_conv2d_bwd_filter(dev, &u->x, &dconv, &dw, &u->conv, !lowp, net->scratch, net->scratch_bytes);
  if (lowp) {
    const ParamSet *ps = &net->params;
    PROFILE_REGION(dev, "amp filter gradient add", {
      amp_accumulate_grads(dev, dw.data, net->cfg.dtype, ps->grads + ps->offsets[u->w],
                           ps->numels[u->w]);
    });
  }
  announce(net, u->w);
  if (gx >= 0) {
    Tensor dx = grad_view(net, gx, &u->x);
    op_conv2d_bwd_data(dev, &dconv, &w, &dx, &u->conv, net->scratch, net->scratch_bytes);
  }
}

// The block's output gradient is in grad[0]; leaves its input gradient there.
// grad[1..3] are scratch.
static void block_bwd(Resnet *net, const Device *dev, ResnetBlock *blk) {
  int last = blk->n_conv - 1;
  // Last conv: grad[0] -> (main: grad[1], shortcut: grad[2]); dconv in grad[3].
  conv_bn_bwd(net, dev, &blk->conv[last], 0, 2, 1, 3);
  // The other convs alternate between grad[1] and grad[3] (grad[0] is free
  // by now, and scratch); the first one's input gradient lands in grad[0].
  int cur = 1;
  for (int j = last - 1; j >= 0; j--) {
    int other = cur == 1 ? 3 : 1;
    int next = j == 0 ? 0 : other;
    int tmp = j == 0 ? other : 0;
    conv_bn_bwd(net, dev, &blk->conv[j], cur, -1, next, tmp);
    cur = next;
  }
  // grad[0] holds the main-path input gradient; add the shortcut's.
  Tensor dx = grad_view(net, 0, &blk->conv[0].x);
  if (blk->has_proj) {
    conv_bn_bwd(net, dev, &blk->proj, 2, -1, 1, 3);
    Tensor dproj = grad_view(net, 1, &blk->proj.x);
    op_add(dev, &dx, &dproj, &dx);
  } else {
    Tensor dshort = grad_view(net, 2, &blk->conv[0].x);
    op_add(dev, &dx, &dshort, &dx);
  }
}

void resnet_backward(Resnet *net, const Device *dev, const Tensor *dlogits, GradHook hook) {
  net->hook = hook;
  Tensor dtop = grad_view(net, 0, net->out);
  if (net->cfg.num_classes > 0) {
    int64_t n = dlogits->shape[0];
    if (dlogits->dtype != DT_F32) DIE("resnet_backward: dlogits are %s, not fp32", dtype_name(dlogits->dtype));
    net->dfeatures = tensor_rows(&net->dfeatures, 0, n);
    const Tensor *dy = dlogits;
    Tensor dy_lowp = tensor_rows(&net->dlogits_lowp, 0, n);
    if (low_precision(net)) {
      op_cast(dev, dlogits, &dy_lowp);
      dy = &dy_lowp;
    }
    Tensor fw = weight(net, net->fc_w);
    Tensor dfw = paramset_grad(&net->params, net->fc_w), dfb = paramset_grad(&net->params, net->fc_b);
    op_linear_bwd(dev, &net->features, &fw, dy, &net->dfeatures, &dfw, &dfb, true);
    announce(net, net->fc_w);
    announce(net, net->fc_b);
    op_global_avgpool_bwd(dev, &net->dfeatures, &dtop);
  } else {
    if (dlogits->dtype != net->cfg.dtype)
      DIE("resnet_backward: the output gradient is %s, the network computes in %s",
          dtype_name(dlogits->dtype), dtype_name(net->cfg.dtype));
    // A same-dtype cast: a copy on dev->stream.
    op_cast(dev, dlogits, &dtop);
  }
  for (int k = net->n_blocks - 1; k >= 0; k--) block_bwd(net, dev, &net->blocks[k]);
  // grad[0]: the gradient of the stem's output (after pooling).
  if (net->cfg.stem_7x7) {
    Tensor dpooled = grad_view(net, 0, &net->stem_pooled);
    Tensor dstem = grad_view(net, 1, &net->stem.y);
    op_maxpool_bwd(dev, &net->stem.y, &net->stem_pooled, &dpooled, &dstem, &net->stem_pool);
    conv_bn_bwd(net, dev, &net->stem, 1, -1, -1, 2);
  } else {
    conv_bn_bwd(net, dev, &net->stem, 0, -1, -1, 2);
  }
  net->hook = (GradHook){0};
}
