// pool.c: shape checks and the CPU reference of pooling (pool.h): plain
// loops over NHWC with channels innermost (contiguous).
#include "ops/pool.h"

#include <math.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/reduce.h"

// ---------------------------------------------------------------- geometry
PoolParams pool_params(int window, int stride, int pad) {
  return (PoolParams){window, window, stride, stride, pad, pad};
}

ConvGeometry pool_geometry(const char *op, const Tensor *x, const Tensor *y,
                           const PoolParams *p) {
  OP_REQUIRE(op, x->ndim == 4 && y->ndim == 4 && x->dtype == y->dtype);
  OP_REQUIRE(op, p->window_h >= 1 && p->window_w >= 1 && p->stride_h >= 1 && p->stride_w >= 1);
  // Wider padding would leave windows with no input in them.
  OP_REQUIRE(op, p->pad_h >= 0 && 2 * p->pad_h <= p->window_h);
  OP_REQUIRE(op, p->pad_w >= 0 && 2 * p->pad_w <= p->window_w);
  ConvGeometry g = {.n = x->shape[0], .h = x->shape[1], .w = x->shape[2], .c = x->shape[3],
                    .k = x->shape[3], .r = p->window_h, .s = p->window_w};
  g.p = conv_out_extent(g.h, g.r, p->stride_h, p->pad_h, 1);
  g.q = conv_out_extent(g.w, g.s, p->stride_w, p->pad_w, 1);
  OP_REQUIRE(op, g.p >= 1 && g.q >= 1);
  OP_REQUIRE(op, y->shape[0] == g.n && y->shape[1] == g.p && y->shape[2] == g.q &&
                     y->shape[3] == g.c);
  return g;
}

// ---------------------------------------------------------------- CPU

// The window of output (oh, ow), clipped to the input: rows [*h0, *h1),
// columns [*w0, *w1).
static void pool_window(const ConvGeometry *g, const PoolParams *p, int64_t oh, int64_t ow,
                        int64_t *h0, int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * p->stride_h - p->pad_h, ws = ow * p->stride_w - p->pad_w;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + g->r < g->h ? hs + g->r : g->h;
  *w1 = ws + g->s < g->w ? ws + g->s : g->w;
}

static void pool_require_f32(const char *op, const Tensor *a, const Tensor *b) {
  OP_REQUIRE(op, a->dtype == DT_F32 && b->dtype == DT_F32);
}

// The pooling ops go image by image on the team's threads: each image's
// output (and its input gradient) is its own, so any team gives the same bits.
void op_maxpool_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y, const PoolParams *p) {
  (void)dev;
  ConvGeometry g = pool_geometry("op_maxpool_fwd", x, y, p);
  pool_require_f32("op_maxpool_fwd", x, y);
  const float *px = x->data;
  float *py = y->data;
#pragma omp parallel for if (tensor_numel(x) >= parallel_min_work)
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t oh = 0; oh < g.p; oh++)
      for (int64_t ow = 0; ow < g.q; ow++) {
        float *out = py + ((n * g.p + oh) * g.q + ow) * g.c;
        int64_t h0, h1, w0, w1;
        pool_window(&g, p, oh, ow, &h0, &h1, &w0, &w1);
        for (int64_t c = 0; c < g.c; c++) out[c] = -INFINITY;
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) {
            const float *in = px + ((n * g.h + ih) * g.w + iw) * g.c;
            for (int64_t c = 0; c < g.c; c++) out[c] = in[c] > out[c] ? in[c] : out[c];
          }
      }
}

// Each output's gradient goes to the first input of its window (in row
// order) that holds the maximum; the window is walked a position at a time,
// all channels together, with a flag per channel once it has its input.
// One input pixel of an output's window: dx[c] += dy[c] where x[c] is the
// window's maximum y[c] and no earlier pixel of the window took it
// (routed[c], all ones once one has). Without branches (ties make them
// unpredictable); dx is never -0, so adding +0 leaves it as it is.
CPU_VECTORISED
static void maxpool_route(const float *x, const float *y, const float *dy, float *dx,
                          uint32_t *routed, int64_t c) {
  for (int64_t j = 0; j < c; j++) {
    uint32_t take = ~routed[j] & -(uint32_t)(x[j] == y[j]);
    dx[j] += cpu_float_masked(dy[j], take);
    routed[j] |= take;
  }
}

void op_maxpool_bwd_cpu(const Device *dev, const Tensor *x, const Tensor *y, const Tensor *dy,
                        const Tensor *dx, const PoolParams *p) {
  (void)dev;
  ConvGeometry g = pool_geometry("op_maxpool_bwd", x, y, p);
  pool_require_f32("op_maxpool_bwd", x, y);
  pool_require_f32("op_maxpool_bwd", dy, dx);
  OP_REQUIRE("op_maxpool_bwd", tensor_same_shape(dy, y) && tensor_same_shape(dx, x));
  const float *px = x->data, *py = y->data, *pdy = dy->data;
  float *pdx = dx->data;
#pragma omp parallel for if (tensor_numel(x) >= parallel_min_work)
  for (int64_t n = 0; n < g.n; n++) {
    uint32_t *routed = xmalloc((size_t)g.c * sizeof(uint32_t));
    memset(pdx + n * g.h * g.w * g.c, 0, (size_t)(g.h * g.w * g.c) * sizeof(float));
    for (int64_t oh = 0; oh < g.p; oh++)
      for (int64_t ow = 0; ow < g.q; ow++) {
        int64_t o = ((n * g.p + oh) * g.q + ow) * g.c;
        int64_t h0, h1, w0, w1;
        pool_window(&g, p, oh, ow, &h0, &h1, &w0, &w1);
        memset(routed, 0, (size_t)g.c * sizeof(uint32_t));
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) {
            int64_t i = ((n * g.h + ih) * g.w + iw) * g.c;
            maxpool_route(px + i, py + o, pdy + o, pdx + i, routed, g.c);
          }
      }
    free(routed);
  }
}

void op_avgpool_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y, const PoolParams *p) {
  (void)dev;
  ConvGeometry g = pool_geometry("op_avgpool_fwd", x, y, p);
  pool_require_f32("op_avgpool_fwd", x, y);
  const float *px = x->data;
  float *py = y->data;
  float inv_area = 1.0f / (float)(g.r * g.s);
#pragma omp parallel for if (g.n * g.h * g.w * g.c >= parallel_min_work)
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t oh = 0; oh < g.p; oh++)
      for (int64_t ow = 0; ow < g.q; ow++) {
        float *out = py + ((n * g.p + oh) * g.q + ow) * g.c;
        int64_t h0, h1, w0, w1;
        pool_window(&g, p, oh, ow, &h0, &h1, &w0, &w1);
        memset(out, 0, (size_t)g.c * sizeof(float));
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) {
            const float *in = px + ((n * g.h + ih) * g.w + iw) * g.c;
            for (int64_t c = 0; c < g.c; c++) out[c] += in[c];
          }
        for (int64_t c = 0; c < g.c; c++) out[c] *= inv_area;
      }
}

void op_avgpool_bwd_cpu(const Device *dev, const Tensor *dy, const Tensor *dx,
                        const PoolParams *p) {
  (void)dev;
  ConvGeometry g = pool_geometry("op_avgpool_bwd", dx, dy, p);
  pool_require_f32("op_avgpool_bwd", dy, dx);
  const float *pdy = dy->data;
  float *pdx = dx->data;
  float inv_area = 1.0f / (float)(g.r * g.s);
  memset(pdx, 0, tensor_bytes(dx));
#pragma omp parallel for if (g.n * g.h * g.w * g.c >= parallel_min_work)
  for (int64_t n = 0; n < g.n; n++)
    for (int64_t oh = 0; oh < g.p; oh++)
      for (int64_t ow = 0; ow < g.q; ow++) {
        const float *grad = pdy + ((n * g.p + oh) * g.q + ow) * g.c;
        int64_t h0, h1, w0, w1;
        pool_window(&g, p, oh, ow, &h0, &h1, &w0, &w1);
        for (int64_t ih = h0; ih < h1; ih++)
          for (int64_t iw = w0; iw < w1; iw++) {
            float *in = pdx + ((n * g.h + ih) * g.w + iw) * g.c;
            for (int64_t c = 0; c < g.c; c++) in[c] += grad[c] * inv_area;
          }
      }
}

// Checks x (N, H, W, C) against y (N, C); returns H * W.
static int64_t global_pool_area(const char *op, const Tensor *x, const Tensor *y) {
  OP_REQUIRE(op, x->ndim == 4 && y->ndim == 2 && x->dtype == y->dtype);
  OP_REQUIRE(op, y->shape[0] == x->shape[0] && y->shape[1] == x->shape[3]);
  OP_REQUIRE(op, x->shape[1] * x->shape[2] >= 1);
  return x->shape[1] * x->shape[2];
}

void op_global_avgpool_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t area = global_pool_area("op_global_avgpool_fwd", x, y);
  pool_require_f32("op_global_avgpool_fwd", x, y);
  int64_t n = x->shape[0], c = x->shape[3];
  for (int64_t i = 0; i < n; i++) {
    // Each image is an (H W, C) matrix: its column means.
    Tensor img = TENSOR((float *)x->data + i * area * c, DT_F32, DEVICE_CPU, area, c);
    Tensor out = TENSOR((float *)y->data + i * c, DT_F32, DEVICE_CPU, c);
    op_mean_cpu(dev, &img, 1, &out);
  }
}

void op_global_avgpool_bwd_cpu(const Device *dev, const Tensor *dy, const Tensor *dx) {
  (void)dev;
  int64_t area = global_pool_area("op_global_avgpool_bwd", dx, dy);
  pool_require_f32("op_global_avgpool_bwd", dy, dx);
  int64_t n = dx->shape[0], c = dx->shape[3];
  const float *pdy = dy->data;
  float *pdx = dx->data;
  float inv_area = 1.0f / (float)area;
  for (int64_t i = 0; i < n; i++)
    for (int64_t a = 0; a < area; a++)
      for (int64_t j = 0; j < c; j++) pdx[(i * area + a) * c + j] = pdy[i * c + j] * inv_area;
}
