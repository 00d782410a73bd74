// ssd_model.c: the SSD network over models/resnet and the op library.
#include "object_detection/ssd_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/reduce.h"
#include "train/amp.h"

SsdModelConfig ssd_model_config_300(int n_classes) {
  SsdModelConfig c = {
      .n_maps = 6,
      .extra_mid = {256, 256, 128, 128, 128},
      .extra_out = {512, 512, 256, 256, 256},
      .extra_stride = {2, 2, 2, 1, 1},
      .extra_pad = {1, 1, 1, 0, 0},
      .boxes = {4, 6, 6, 6, 4, 4},
      .n_classes = n_classes,
  };
  ResnetConfig b = resnet_config_50();
  b.block = RESNET_BASIC;
  b.stages = 3;
  b.blocks[0] = 3, b.blocks[1] = 4, b.blocks[2] = 6;
  b.stage_stride[0] = 1, b.stage_stride[1] = 2, b.stage_stride[2] = 1;
  b.image_size = 300;
  b.num_classes = 0;
  b.zero_init_residual = false;  // torchvision's default
  c.backbone = b;
  return c;
}

static void check_config(const SsdModelConfig *cfg) {
  if (cfg->n_maps < 1 || cfg->n_maps > SSD_MAX_MAPS)
    DIE("ssd model: %d feature maps (1..%d)", cfg->n_maps, SSD_MAX_MAPS);
  if (cfg->n_classes < 2) DIE("ssd model: %d classes (background and at least one)", cfg->n_classes);
  if (cfg->backbone.num_classes != 0) DIE("ssd model: the backbone has a classifier");
  for (int k = 0; k < cfg->n_maps; k++) {
    if (cfg->boxes[k] < 1) DIE("ssd model: map %d has %d boxes per location", k, cfg->boxes[k]);
    if (k == cfg->n_maps - 1) break;
    if (cfg->extra_mid[k] < 1 || cfg->extra_out[k] < 1 || cfg->extra_stride[k] < 1 ||
        cfg->extra_pad[k] < 0)
      DIE("ssd model: extra block %d: channels %d, %d, stride %d, pad %d", k, cfg->extra_mid[k],
          cfg->extra_out[k], cfg->extra_stride[k], cfg->extra_pad[k]);
  }
}

int ssd_model_map_sizes(const SsdModelConfig *cfg, int sizes[SSD_MAX_MAPS]) {
  check_config(cfg);
  const ResnetConfig *b = &cfg->backbone;
  int64_t h = b->image_size;
  if (b->stem_7x7) h = conv_out_extent(conv_out_extent(h, 7, 2, 3, 1), 3, 2, 1, 1);
  for (int s = 0; s < b->stages; s++) {
    int stride = b->stage_stride[s] > 0 ? b->stage_stride[s] : (s > 0 ? 2 : 1);
    h = conv_out_extent(h, 3, stride, 1, 1);  // the first block's strided 3x3
  }
  for (int k = 0; k < cfg->n_maps; k++) {
    if (k > 0) h = conv_out_extent(h, 3, cfg->extra_stride[k - 1], cfg->extra_pad[k - 1], 1);
    if (h < 1) return k;
    sizes[k] = (int)h;
  }
  return cfg->n_maps;
}

void ssd_model_check_boxes(const SsdModelConfig *cfg, const SsdBoxConfig *boxes) {
  int sizes[SSD_MAX_MAPS];
  int maps = ssd_model_map_sizes(cfg, sizes);
  if (maps < cfg->n_maps)
    DIE("ssd model: feature map %d is empty for a %d-pixel input", maps, cfg->backbone.image_size);
  if (cfg->backbone.image_size != boxes->image_size)
    DIE("ssd model: input %d pixels, the default boxes are for %d", cfg->backbone.image_size,
        boxes->image_size);
  if (cfg->n_maps != boxes->n_maps)
    DIE("ssd model: %d feature maps, the default boxes have %d", cfg->n_maps, boxes->n_maps);
  for (int k = 0; k < cfg->n_maps; k++) {
    if (sizes[k] != boxes->feat_size[k])
      DIE("ssd model: feature map %d is %dx%d, the default boxes' feat_size is %d", k, sizes[k],
          sizes[k], boxes->feat_size[k]);
    if (cfg->boxes[k] != ssd_boxes_per_location(boxes, k))
      DIE("ssd model: map %d has %d boxes per location, the default boxes %d", k, cfg->boxes[k],
          ssd_boxes_per_location(boxes, k));
  }
}

// ------------------------------------------------------------ construction

static Tensor alloc_act(SsdModel *m, DType dt, int ndim, const int64_t *shape) {
  Tensor t = tensor_make(NULL, dt, m->device, ndim, shape);
  t.data = device_alloc(m->device, (size_t)tensor_numel(&t) * dtype_size(dt));
  return t;
}

static int add_param(SsdModel *m, size_t *name_used, const char *name, int ndim,
                     const int64_t *shape, unsigned flags) {
  ParamSpec *s = &m->specs[m->n_params];
  size_t len = strlen(name) + 1;
  s->name = memcpy(m->names + *name_used, name, len);
  *name_used += len;
  s->ndim = ndim;
  for (int d = 0; d < ndim; d++) s->shape[d] = shape[d];
  s->flags = flags;
  return m->n_params++;
}

// A convolution with bias on an (h, w, in_c) input; its output is allocated.
static void add_conv(SsdModel *m, size_t *name_used, SsdConv *c, const char *prefix, int64_t h,
                     int64_t w, int64_t in_c, int64_t out_c, int kernel, int stride, int pad,
                     bool relu) {
  char name[64];
  c->in_c = in_c;
  c->out_c = out_c;
  c->kernel = kernel;
  c->relu = relu;
  c->conv = conv_params(stride, pad, 1);
  c->out_h = conv_out_extent(h, kernel, stride, pad, 1);
  c->out_w = conv_out_extent(w, kernel, stride, pad, 1);
  snprintf(name, sizeof name, "%s.weight", prefix);
  c->w = add_param(m, name_used, name, 4, (int64_t[]){out_c, kernel, kernel, in_c}, 0);
  snprintf(name, sizeof name, "%s.bias", prefix);
  c->b = add_param(m, name_used, name, 1, (int64_t[]){out_c}, PARAM_NO_DECAY);
  c->y = alloc_act(m, m->cfg.dtype, 4, (int64_t[]){m->max_batch, c->out_h, c->out_w, out_c});
  Tensor x1 = tensor_make(NULL, DT_F32, DEVICE_CPU, 4, (int64_t[]){1, h, w, in_c});
  Tensor w1 = tensor_make(NULL, DT_F32, DEVICE_CPU, 4, (int64_t[]){out_c, kernel, kernel, in_c});
  size_t need = op_conv2d_scratch_bytes(&x1, &w1, &c->conv);
  if (need > m->scratch_bytes) m->scratch_bytes = need;
}

// Every convolution of the extras and heads, in parameter order.
static int own_convs(SsdModel *m, SsdConv **convs) {
  int n = 0;
  for (int e = 0; e < m->cfg.n_maps - 1; e++) {
    convs[n++] = &m->extra[e][0];
    convs[n++] = &m->extra[e][1];
  }
  for (int k = 0; k < m->cfg.n_maps; k++) {
    convs[n++] = &m->map[k].loc;
    convs[n++] = &m->map[k].conf;
  }
  return n;
}

// Xavier-uniform weights and PyTorch's default Conv2d biases (ssd_model.h).
static void init_own_values(SsdModel *m, uint64_t seed) {
  ParamSet *ps = &m->params;
  int64_t base = ps->offsets[m->first_own], n = ps->total_numel - base;
  float *host = xcalloc((size_t)n, sizeof(float));
  SsdConv *convs[4 * SSD_MAX_MAPS];
  int count = own_convs(m, convs);
  for (int i = 0; i < count; i++) {
    const SsdConv *c = convs[i];
    double area = (double)(c->kernel * c->kernel);
    double fan_in = (double)c->in_c * area, fan_out = (double)c->out_c * area;
    float wb = (float)sqrt(6.0 / (fan_in + fan_out)), bb = (float)(1.0 / sqrt(fan_in));
    rng_fill_uniform_cpu(host + ps->offsets[c->w] - base, ps->numels[c->w], seed, (uint64_t)c->w,
                         0, -wb, wb);
    rng_fill_uniform_cpu(host + ps->offsets[c->b] - base, ps->numels[c->b], seed, (uint64_t)c->b,
                         0, -bb, bb);
  }
  device_copy(m->device, ps->params + base, DEVICE_CPU, host, (size_t)n * sizeof(float));
  free(host);
}

void ssd_model_init(SsdModel *m, const SsdModelConfig *cfg, int64_t max_batch, int n_state,
                    DeviceKind device, uint64_t seed) {
  memset(m, 0, sizeof *m);
  int sizes[SSD_MAX_MAPS];
  int maps = ssd_model_map_sizes(cfg, sizes);
  if (maps < cfg->n_maps)
    DIE("ssd model: feature map %d is empty for a %d-pixel input", maps, cfg->backbone.image_size);
  m->cfg = *cfg;
  m->device = device;
  m->max_batch = max_batch;
  ResnetConfig bcfg = cfg->backbone;
  bcfg.dtype = cfg->dtype;
  m->cfg.backbone = bcfg;
  resnet_init(&m->backbone, &bcfg, max_batch, 0, device, seed);
  Resnet *bone = &m->backbone;
  const ResnetConvBn *last = &bone->blocks[bone->n_blocks - 1].conv[bone->blocks[bone->n_blocks - 1].n_conv - 1];
  if (last->out_h != sizes[0]) DIE("ssd model: backbone output %lld, expected %d", (long long)last->out_h, sizes[0]);

  // The parameter table: the backbone's rows, then 4 per extra block and map.
  int n_maps = cfg->n_maps, own = 4 * (n_maps - 1) + 4 * n_maps;
  m->specs = xcalloc((size_t)(bone->n_params + own), sizeof(ParamSpec));
  memcpy(m->specs, bone->specs, (size_t)bone->n_params * sizeof(ParamSpec));
  m->n_params = m->first_own = bone->n_params;
  m->names = xmalloc((size_t)own * 32);
  size_t name_used = 0;
  DType dt = cfg->dtype;
  int64_t n = max_batch, c = bone->out_channels, h = sizes[0];
  int64_t most_map = 0, most_y = 0, most_c = 0;
  for (int e = 0; e < n_maps - 1; e++) {
    char prefix[32];
    snprintf(prefix, sizeof prefix, "extra%d.a", e);
    add_conv(m, &name_used, &m->extra[e][0], prefix, h, h, c, cfg->extra_mid[e], 1, 1, 0, true);
    snprintf(prefix, sizeof prefix, "extra%d.b", e);
    add_conv(m, &name_used, &m->extra[e][1], prefix, h, h, cfg->extra_mid[e], cfg->extra_out[e],
             3, cfg->extra_stride[e], cfg->extra_pad[e], true);
    int64_t mid = h * h * cfg->extra_mid[e];
    if (mid > most_y) most_y = mid;
    if (cfg->extra_mid[e] > most_c) most_c = cfg->extra_mid[e];
    c = cfg->extra_out[e];
    h = m->extra[e][1].out_h;
  }
  int64_t nc = cfg->n_classes, first_box = 0;
  for (int k = 0; k < n_maps; k++) {
    SsdMap *mp = &m->map[k];
    mp->side = sizes[k];
    mp->channels = k == 0 ? bone->out_channels : cfg->extra_out[k - 1];
    mp->boxes = cfg->boxes[k];
    mp->first_box = first_box;
    int64_t s = mp->side, boxes = mp->boxes * s * s;
    first_box += boxes;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "head%d.loc", k);
    add_conv(m, &name_used, &mp->loc, prefix, s, s, mp->channels, 4 * mp->boxes, 3, 1, 1, false);
    snprintf(prefix, sizeof prefix, "head%d.conf", k);
    add_conv(m, &name_used, &mp->conf, prefix, s, s, mp->channels, nc * mp->boxes, 3, 1, 1, false);
    mp->loc_grad = alloc_act(m, dt, 4, (int64_t[]){n, s, s, 4 * mp->boxes});
    mp->conf_grad = alloc_act(m, dt, 4, (int64_t[]){n, s, s, nc * mp->boxes});
    mp->dx = alloc_act(m, dt, 4, (int64_t[]){n, s, s, mp->channels});
    int64_t map = s * s * mp->channels, d = nc > 4 ? nc : 4;
    if (map > most_map) most_map = map;
    if (d * mp->boxes > most_c) most_c = d * mp->boxes;
    if (mp->channels > most_c) most_c = mp->channels;
  }
  m->n_boxes = first_box;
  if (m->n_params != m->first_own + own) DIE("ssd model: %d parameter tensors, counted %d", m->n_params, m->first_own + own);

  paramset_init(&m->params, m->specs, m->n_params, n_state, device);
  resnet_share_params(bone, &m->params);
  m->buffers = &bone->buffers;
  init_own_values(m, seed);

  m->loc = alloc_act(m, DT_F32, 3, (int64_t[]){n, m->n_boxes, 4});
  m->logits = alloc_act(m, DT_F32, 3, (int64_t[]){n, m->n_boxes, nc});
  if (dt != DT_F32) {
    m->loc_lowp = alloc_act(m, dt, 3, (int64_t[]){n, m->n_boxes, 4});
    m->logits_lowp = alloc_act(m, dt, 3, (int64_t[]){n, m->n_boxes, nc});
    size_t bytes = (size_t)(m->params.total_numel - m->params.offsets[m->first_own]) * dtype_size(dt);
    m->lowp_weights = device_alloc(device, bytes);
    m->lowp_grads = device_alloc(device, bytes);
  }
  m->grad_y = alloc_act(m, dt, 1, (int64_t[]){n * most_y});
  m->grad_x = alloc_act(m, dt, 1, (int64_t[]){n * most_map});
  m->dbias = device_alloc(device, (size_t)most_c * sizeof(float));
  if (device == DEVICE_CPU) {
    m->scratch_bytes *= 4;  // room to convolve several images per GEMM
    m->scratch = xmalloc(m->scratch_bytes);
  }
}

void ssd_model_free(SsdModel *m) {
  DeviceKind d = m->device;
  SsdConv *convs[4 * SSD_MAX_MAPS];
  int count = own_convs(m, convs);
  for (int i = 0; i < count; i++) device_free(d, convs[i]->y.data);
  for (int k = 0; k < m->cfg.n_maps; k++) {
    device_free(d, m->map[k].loc_grad.data);
    device_free(d, m->map[k].conf_grad.data);
    device_free(d, m->map[k].dx.data);
  }
  void *owned[] = {m->loc.data, m->logits.data, m->loc_lowp.data, m->logits_lowp.data,
                   m->lowp_weights, m->lowp_grads, m->grad_y.data, m->grad_x.data, m->dbias};
  for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) device_free(d, owned[i]);
  resnet_free(&m->backbone);
  paramset_free(&m->params);
  free(m->scratch);
  free(m->specs);
  free(m->names);
  memset(m, 0, sizeof *m);
}

// ------------------------------------------------------------ forward

// Weight or bias i as the convolutions read it: fp32, or the low-precision copy.
static Tensor weight(const SsdModel *m, int i) {
  if (m->cfg.dtype != DT_F32) return amp_weight_view(&m->params, m->lowp_weights, m->cfg.dtype, m->first_own, i);
  return paramset_param(&m->params, i);
}

static const Tensor *conv_fwd(SsdModel *m, const Device *dev, SsdConv *c, const Tensor *x) {
  c->x = *x;
  c->y = tensor_rows(&c->y, 0, x->shape[0]);
  Tensor w = weight(m, c->w), b = weight(m, c->b);
  op_conv2d_fwd(dev, x, &w, &b, &c->y, &c->conv, m->scratch, m->scratch_bytes);
  if (c->relu) op_relu_fwd(dev, &c->y, &c->y);
  return &c->y;
}

_Static_assert(SSD_MAX_MAPS <= LAYOUT_MAX_HEADS, "op_heads_to_boxes takes every map's head");

// The maps' head outputs, or their gradients, in the heads' layout (n, H, W,
// D * boxes), and their anchor counts, for op_heads_to_boxes and back.
static void heads(SsdModel *m, int64_t n, bool grads, Tensor *loc, Tensor *conf, int *anchors) {
  for (int k = 0; k < m->cfg.n_maps; k++) {
    SsdMap *mp = &m->map[k];
    loc[k] = tensor_rows(grads ? &mp->loc_grad : &mp->loc.y, 0, n);
    conf[k] = tensor_rows(grads ? &mp->conf_grad : &mp->conf.y, 0, n);
    anchors[k] = (int)mp->boxes;
  }
}

void ssd_model_forward(SsdModel *m, const Device *dev, const Tensor *x, bool train,
                       const Tensor **loc, const Tensor **logits) {
  int64_t n = x->shape[0];
  if (n > m->max_batch) DIE("ssd_model_forward: batch %lld over the %lld allocated", (long long)n,
                            (long long)m->max_batch);
  DType dt = m->cfg.dtype;
  if (dt != DT_F32) {
    const ParamSet *ps = &m->params;
    int64_t base = ps->offsets[m->first_own];
    PROFILE_REGION(dev, "amp weight cast", {
      amp_cast(dev, ps->params + base, m->lowp_weights, dt, ps->total_numel - base);
    });
  }
  const Tensor *h = resnet_forward(&m->backbone, dev, x, train);
  for (int k = 0; k < m->cfg.n_maps; k++) {
    SsdMap *mp = &m->map[k];
    if (k > 0) h = conv_fwd(m, dev, &m->extra[k - 1][1], conv_fwd(m, dev, &m->extra[k - 1][0], h));
    mp->x = h;
    conv_fwd(m, dev, &mp->loc, h);
    conv_fwd(m, dev, &mp->conf, h);
  }
  // Every head's boxes into the outputs' box order, one op an output.
  Tensor lheads[SSD_MAX_MAPS], cheads[SSD_MAX_MAPS];
  int anchors[SSD_MAX_MAPS];
  heads(m, n, false, lheads, cheads, anchors);
  m->loc = tensor_rows(&m->loc, 0, n);
  m->logits = tensor_rows(&m->logits, 0, n);
  if (dt == DT_F32) {
    op_heads_to_boxes(dev, lheads, anchors, m->cfg.n_maps, &m->loc);
    op_heads_to_boxes(dev, cheads, anchors, m->cfg.n_maps, &m->logits);
  } else {
    Tensor l = tensor_rows(&m->loc_lowp, 0, n), c = tensor_rows(&m->logits_lowp, 0, n);
    op_heads_to_boxes(dev, lheads, anchors, m->cfg.n_maps, &l);
    op_heads_to_boxes(dev, cheads, anchors, m->cfg.n_maps, &c);
    op_cast(dev, &l, &m->loc);
    op_cast(dev, &c, &m->logits);
  }
  *loc = &m->loc;
  *logits = &m->logits;
}

// ------------------------------------------------------------ backward

static void announce(const SsdModel *m, int i) {
  if (m->hook.ready) m->hook.ready(m->hook.ctx, i);
}

static Tensor grad_as(const Tensor *buf, const Tensor *like) {
  return tensor_make(buf->data, buf->dtype, buf->device, like->ndim, like->shape);
}

// From dy (c->y's gradient; ReLU's mask applied in place): the bias and
// filter gradients, and the input gradient written to dx, or added to it
// (add) through m->grad_x; dx NULL: not wanted.
static void conv_bwd(SsdModel *m, const Device *dev, SsdConv *c, const Tensor *dy,
                     const Tensor *dx, bool add) {
  ParamSet *ps = &m->params;
  if (c->relu) op_relu_bwd(dev, &c->y, dy, dy);
  Tensor db = tensor_make(m->dbias, DT_F32, m->device, 1, (int64_t[]){c->out_c});
  Tensor gb = paramset_grad(ps, c->b);
  op_sum(dev, dy, 3, &db);
  op_add(dev, &gb, &db, &gb);
  announce(m, c->b);
  DType dt = m->cfg.dtype;
  bool lowp = dt != DT_F32;
  Tensor dw = lowp ? amp_weight_view(ps, m->lowp_grads, dt, m->first_own, c->w) : paramset_grad(ps, c->w);
  op_conv2d_bwd_filter(dev, &c->x, dy, &dw, &c->conv, !lowp, m->scratch, m->scratch_bytes);
  if (lowp)
    PROFILE_REGION(dev, "amp filter gradient add", {
      amp_accumulate_grads(dev, dw.data, dt, ps->grads + ps->offsets[c->w], ps->numels[c->w]);
    });
  announce(m, c->w);
  if (!dx) return;
  Tensor w = weight(m, c->w);
  Tensor tmp = grad_as(&m->grad_x, dx);
  op_conv2d_bwd_data(dev, dy, &w, add ? &tmp : dx, &c->conv, m->scratch, m->scratch_bytes);
  if (add) op_add(dev, dx, &tmp, dx);
}

// One head's backward from its output's gradient dy into the map's gradient.
static void head_bwd(SsdModel *m, const Device *dev, SsdMap *mp, SsdConv *c, const Tensor *dy,
                     int64_t n, bool add) {
  Tensor dx = tensor_rows(&mp->dx, 0, n);
  conv_bwd(m, dev, c, dy, &dx, add);
}

void ssd_model_backward(SsdModel *m, const Device *dev, const Tensor *dloc,
                        const Tensor *dlogits, GradHook hook) {
  int64_t n = m->loc.shape[0], nc = m->cfg.n_classes;
  if (dloc->dtype != DT_F32 || dlogits->dtype != DT_F32)
    DIE("ssd_model_backward: the output gradients are %s and %s, not fp32",
        dtype_name(dloc->dtype), dtype_name(dlogits->dtype));
  if (dloc->ndim != 3 || dloc->shape[0] != n || tensor_numel(dloc) != tensor_numel(&m->loc) ||
      dlogits->ndim != 3 || dlogits->shape[0] != n || tensor_numel(dlogits) != tensor_numel(&m->logits))
    DIE("ssd_model_backward: gradients do not match the latest forward's (%lld, %lld, 4/%lld) outputs",
        (long long)n, (long long)m->n_boxes, (long long)nc);
  m->hook = hook;
  Tensor lgrads[SSD_MAX_MAPS], cgrads[SSD_MAX_MAPS];
  int anchors[SSD_MAX_MAPS];
  heads(m, n, true, lgrads, cgrads, anchors);
  const Tensor *gl = dloc, *gc = dlogits;
  Tensor l = tensor_rows(&m->loc_lowp, 0, n), c = tensor_rows(&m->logits_lowp, 0, n);
  if (m->cfg.dtype != DT_F32) {
    op_cast(dev, dloc, &l);
    op_cast(dev, dlogits, &c);
    gl = &l;
    gc = &c;
  }
  // The outputs' gradients back into each head's layout, one op an output.
  op_boxes_to_heads(dev, gl, anchors, lgrads, m->cfg.n_maps);
  op_boxes_to_heads(dev, gc, anchors, cgrads, m->cfg.n_maps);
  for (int k = m->cfg.n_maps - 1; k >= 0; k--) {
    SsdMap *mp = &m->map[k];
    head_bwd(m, dev, mp, &mp->loc, &lgrads[k], n, false);
    head_bwd(m, dev, mp, &mp->conf, &cgrads[k], n, true);
    if (k == m->cfg.n_maps - 1) continue;
    // Extra block k (map k -> k + 1): map k + 1's gradient is complete.
    SsdConv *a = &m->extra[k][0], *b = &m->extra[k][1];
    Tensor dnext = tensor_rows(&m->map[k + 1].dx, 0, n), dmid = grad_as(&m->grad_y, &a->y);
    conv_bwd(m, dev, b, &dnext, &dmid, false);
    Tensor dx = tensor_rows(&mp->dx, 0, n);
    conv_bwd(m, dev, a, &dmid, &dx, true);
  }
  Tensor d0 = tensor_rows(&m->map[0].dx, 0, n);
  resnet_backward(&m->backbone, dev, &d0, hook);
  m->hook = (GradHook){0};
}
