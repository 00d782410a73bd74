// conv.c: shape checks and the CPU reference of the convolution and ReLU
// (conv.h). Convolution is oneDNN where it has a kernel (conv_dnnl.c), else
// im2col + OpenBLAS GEMM over NHWC; ReLU is a plain loop.
#include "ops/conv.h"

#include <cblas.h>
#include <string.h>

#include "core/check.h"
#include "core/parallel.h"
#include "ops/conv_dnnl.h"


// ---------------------------------------------------------------- geometry

ConvParams conv_params(int stride, int pad, int dilation) {
  return (ConvParams){stride, stride, pad, pad, dilation, dilation};
}

int64_t conv_out_extent(int64_t in, int64_t kernel, int stride, int pad, int dilation) {
  int64_t span = in + 2 * (int64_t)pad - (int64_t)dilation * (kernel - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

ConvGeometry conv_geometry(const char *op, const Tensor *x, const Tensor *w, const Tensor *y,
                           const ConvParams *p) {
  OP_REQUIRE(op, x->ndim == 4 && w->ndim == 4 && y->ndim == 4);
  OP_REQUIRE(op, x->dtype == w->dtype && x->dtype == y->dtype);
  OP_REQUIRE(op, p->stride_h >= 1 && p->stride_w >= 1 && p->dil_h >= 1 && p->dil_w >= 1);
  OP_REQUIRE(op, p->pad_h >= 0 && p->pad_w >= 0);
  ConvGeometry g = {.n = x->shape[0], .h = x->shape[1], .w = x->shape[2], .c = x->shape[3],
                    .k = w->shape[0], .r = w->shape[1], .s = w->shape[2]};
  g.p = conv_out_extent(g.h, g.r, p->stride_h, p->pad_h, p->dil_h);
  g.q = conv_out_extent(g.w, g.s, p->stride_w, p->pad_w, p->dil_w);
  OP_REQUIRE(op, w->shape[3] == g.c && g.p >= 1 && g.q >= 1);
  OP_REQUIRE(op, g.c >= 1 && g.k >= 1);  // a batch may be empty, channels not
  OP_REQUIRE(op, y->shape[0] == g.n && y->shape[1] == g.p && y->shape[2] == g.q &&
                     y->shape[3] == g.k);
  return g;
}

// ---------------------------------------------------------------- CPU: convolution

void op_conv2d_set_tf32_cpu(const Device *dev, bool allow) { (void)dev, (void)allow; }

// A 1x1, stride-1, unpadded convolution is a GEMM on x as it is.
static bool conv_is_pointwise(const ConvGeometry *g, const ConvParams *p) {
  return g->r == 1 && g->s == 1 && p->stride_h == 1 && p->stride_w == 1 && p->pad_h == 0 &&
         p->pad_w == 0;
}

static size_t conv_col_image_bytes(const ConvGeometry *g) {
  return (size_t)(g->p * g->q * g->r * g->s * g->c) * sizeof(float);
}

size_t op_conv2d_scratch_bytes(const Tensor *x, const Tensor *w, const ConvParams *p) {
  OP_REQUIRE("op_conv2d_scratch_bytes", x->ndim == 4 && w->ndim == 4);
  ConvGeometry g = {.h = x->shape[1], .w = x->shape[2], .c = x->shape[3], .r = w->shape[1],
                    .s = w->shape[2]};
  g.p = conv_out_extent(g.h, g.r, p->stride_h, p->pad_h, p->dil_h);
  g.q = conv_out_extent(g.w, g.s, p->stride_w, p->pad_w, p->dil_w);
  return conv_is_pointwise(&g, p) ? 0 : conv_col_image_bytes(&g);
}

// How many images one im2col matrix holds: as many as the scratch allows, up
// to about 1 MiB of matrix, so that it is still in cache when the GEMM reads
// it (larger matrices measured up to 2x slower: the copy becomes
// memory-bound).
static int64_t conv_chunk_images(const char *op, const ConvGeometry *g, const ConvParams *p,
                                 size_t scratch_bytes) {
  if (g->n == 0) return 1;  // no images: no matrix, no scratch needed
  if (conv_is_pointwise(g, p)) return g->n;
  size_t per_image = conv_col_image_bytes(g);
  int64_t fit = (int64_t)(scratch_bytes / per_image);
  if (fit < 1)
    DIE("%s: scratch of %zu bytes, need at least %zu (op_conv2d_scratch_bytes)", op,
        scratch_bytes, per_image);
  int64_t cached = (int64_t)(((size_t)1 << 20) / per_image);
  int64_t chunk = fit < cached ? fit : (cached > 1 ? cached : 1);
  return chunk < g->n ? chunk : g->n;
}

// Copies n floats from src to dst (to_col), or adds dst back into src.
static void conv_move_run(float *src, float *dst, int64_t n, bool to_col) {
  if (to_col)
    memcpy(dst, src, (size_t)n * sizeof(float));
  else
    for (int64_t i = 0; i < n; i++) src[i] += dst[i];
}

// Walks the im2col matrix of `images` images starting at x: row (img, oh,
// ow), column block (r, s) holds the C input channels under that tap. to_col
// copies x into col (zeros for padding); otherwise adds col back into x.
// With dilation 1 along W the S taps of a kernel row are S adjacent pixels,
// S * C contiguous floats in NHWC: one run instead of S.
static void conv_im2col(float *x, float *col, const ConvGeometry *g, const ConvParams *p,
                        int64_t images, bool to_col) {
  int64_t sc = g->s * g->c;
  float *row = col;  // (images * P * Q, R * S * C)
  for (int64_t img = 0; img < images; img++)
    for (int64_t oh = 0; oh < g->p; oh++)
      for (int64_t ow = 0; ow < g->q; ow++)
        for (int64_t r = 0; r < g->r; r++, row += sc) {
          int64_t ih = oh * p->stride_h - p->pad_h + r * p->dil_h;
          int64_t iw0 = ow * p->stride_w - p->pad_w;
          float *src = x + ((img * g->h + ih) * g->w + iw0) * g->c;
          if (ih < 0 || ih >= g->h) {
            if (to_col) memset(row, 0, (size_t)sc * sizeof(float));
          } else if (p->dil_w == 1 && iw0 >= 0 && iw0 + g->s <= g->w) {
            conv_move_run(src, row, sc, to_col);
          } else {
            for (int64_t s = 0; s < g->s; s++) {
              int64_t iw = iw0 + s * p->dil_w;
              if (iw >= 0 && iw < g->w)
                conv_move_run(src + s * p->dil_w * g->c, row + s * g->c, g->c, to_col);
              else if (to_col)
                memset(row + s * g->c, 0, (size_t)g->c * sizeof(float));
            }
          }
        }
}

// The im2col matrix of images [n0, n0 + images) of x (N, H, W, C): x itself
// for a pointwise convolution, else built in the scratch.
static float *conv_chunk_col(const ConvGeometry *g, const ConvParams *p, const Tensor *x,
                             int64_t n0, int64_t images, void *scratch) {
  float *xs = (float *)x->data + n0 * g->h * g->w * g->c;  // (images, H, W, C)
  if (conv_is_pointwise(g, p)) return xs;
  conv_im2col(xs, scratch, g, p, images, true);
  return scratch;  // (images * P * Q, R * S * C)
}

// The convolutions share their chunks of images among the team's threads
// (each GEMM then runs on its thread alone). Each thread builds its im2col
// matrices in a buffer of its own; the first uses the caller's scratch.
static float *conv_thread_col(void *scratch, size_t bytes) {
  return parallel_thread_index() == 0 ? scratch : xmalloc(bytes ? bytes : 1);
}
static void conv_thread_col_free(void *col, void *scratch) {
  if (col != scratch) free(col);
}
#define CONV_PARALLEL(g, chunks) ((chunks) > 1 && (g).n * (g).p * (g).q * (g).k >= parallel_min_work)

// ---------------------------------------------------------------- CPU: convolution by oneDNN

// oneDNN convolves the batch in up to CONV_LIB_CHUNKS chunks of `chunk` images
// (the last may be shorter), one run per chunk on one thread: chunks fixed by
// the shapes, as the plain path's are, so the bits do not follow the threads.
enum { CONV_LIB_CHUNKS = 16 };

typedef struct ConvLib {
  const ConvDnnl *prim[2];  // for a whole chunk, for the last chunk
  int64_t chunk, chunks;
  size_t scratch_bytes;     // oneDNN's scratch, per thread, guard included
  size_t filter_bytes;      // w or dw in the kernels' layout
} ConvLib;

// Each thread's oneDNN scratch ends in CONV_LIB_GUARD bytes of a pattern
// that every run must leave as it found them. A kernel that writes past the
// scratch it asked for would otherwise corrupt the heap silently; this stops
// the run and names the shape. The one known (conv_dnnl.c refuses it) began
// its stray writes up to 128 bytes past the end; checking 1 KB after each
// run costs well under 1% of a convolution.
enum { CONV_LIB_GUARD = 1024, CONV_LIB_GUARD_BYTE = 0xA5 };

// The thread's buffer: the scratch with its guard, then `extra` bytes.
static char *conv_lib_own(const ConvLib *lib, size_t extra) {
  char *own = xmalloc(lib->scratch_bytes + extra);
  memset(own + lib->scratch_bytes - CONV_LIB_GUARD, CONV_LIB_GUARD_BYTE, CONV_LIB_GUARD);
  return own;
}

static void conv_lib_guard_check(const ConvLib *lib, const ConvGeometry *g, const char *own) {
  const unsigned char *guard = (const unsigned char *)own + lib->scratch_bytes - CONV_LIB_GUARD;
  for (int i = 0; i < CONV_LIB_GUARD; i++)
    if (guard[i] != CONV_LIB_GUARD_BYTE)
      DIE("op_conv2d: oneDNN wrote past its scratch of %zu bytes (C %lld, K %lld, %lldx%lld "
          "filter on %lldx%lld); make DNNL=0 builds without it",
          lib->scratch_bytes - CONV_LIB_GUARD, (long long)g->c, (long long)g->k, (long long)g->r,
          (long long)g->s, (long long)g->h, (long long)g->w);
}

// Fills lib and answers true where oneDNN takes this convolution: it has
// kernels for both chunk sizes, and they agree on the filters' layout.
static bool conv_library(ConvDnnlKind kind, const ConvGeometry *g, const ConvParams *p, bool bias,
                         ConvLib *lib) {
  if (g->n == 0) return false;
  lib->chunk = (g->n + CONV_LIB_CHUNKS - 1) / CONV_LIB_CHUNKS;
  lib->chunks = parallel_pieces(g->n, lib->chunk);
  int64_t last = g->n - (lib->chunks - 1) * lib->chunk;
  lib->prim[0] = conv_dnnl_get(kind, g, p, lib->chunk, bias);
  lib->prim[1] = last == lib->chunk ? lib->prim[0] : conv_dnnl_get(kind, g, p, last, bias);
  if (!lib->prim[0] || !lib->prim[1] || !conv_dnnl_same_filter_layout(lib->prim[0], lib->prim[1]))
    return false;
  size_t a = conv_dnnl_scratch_bytes(lib->prim[0]), b = conv_dnnl_scratch_bytes(lib->prim[1]);
  lib->scratch_bytes = (a > b ? a : b) + 63;  // rounded for what follows it
  lib->scratch_bytes -= lib->scratch_bytes % 64;
  lib->scratch_bytes += CONV_LIB_GUARD;
  lib->filter_bytes = conv_dnnl_filter_bytes(lib->prim[0]);
  return true;
}

#define CONV_LIB_CHUNK(lib, g, ci, n0, images)                           \
  int64_t n0 = (ci) * (lib)->chunk, images = (g)->n - n0 < (lib)->chunk ? (g)->n - n0 : (lib)->chunk; \
  const ConvDnnl *prim = (lib)->prim[images < (lib)->chunk]

// FWD and BWD_DATA: w into the kernels' layout, then the chunks on the team.
static void conv_lib_apply(const ConvLib *lib, const ConvGeometry *g, const float *in,
                           int64_t in_image, const float *w, const float *bias, float *out,
                           int64_t out_image) {
  float *wl = xmalloc(lib->filter_bytes);
  conv_dnnl_filter(lib->prim[0], w, wl);
#pragma omp parallel if (CONV_PARALLEL(*g, lib->chunks))
  {
    char *own = conv_lib_own(lib, 0);
#pragma omp for
    for (int64_t ci = 0; ci < lib->chunks; ci++) {
      CONV_LIB_CHUNK(lib, g, ci, n0, images);
      conv_dnnl_run(prim, in + n0 * in_image, wl, bias, out + n0 * out_image, own);
      conv_lib_guard_check(lib, g, own);
    }
    free(own);
  }
  free(wl);
}

void op_conv2d_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *w, const Tensor *bias,
                       const Tensor *y, const ConvParams *p, void *scratch,
                       size_t scratch_bytes) {
  (void)dev;
  ConvGeometry g = conv_geometry("op_conv2d_fwd", x, w, y, p);
  OP_REQUIRE("op_conv2d_fwd", x->dtype == DT_F32);
  OP_REQUIRE("op_conv2d_fwd", !bias || (bias->dtype == DT_F32 && tensor_numel(bias) == g.k));
  int64_t chunk = conv_chunk_images("op_conv2d_fwd", &g, p, scratch_bytes);
  ConvLib lib;
  if (conv_library(CONV_DNNL_FWD, &g, p, bias != NULL, &lib)) {
    conv_lib_apply(&lib, &g, x->data, g.h * g.w * g.c, w->data, bias ? bias->data : NULL, y->data,
                   g.p * g.q * g.k);
    return;
  }
  int64_t rsc = g.r * g.s * g.c, pq = g.p * g.q, chunks = parallel_pieces(g.n, chunk);
  size_t col_bytes = conv_is_pointwise(&g, p) ? 0 : (size_t)chunk * conv_col_image_bytes(&g);
#pragma omp parallel if (CONV_PARALLEL(g, chunks))
  {
    float *own = conv_thread_col(scratch, col_bytes);
#pragma omp for
    for (int64_t ci = 0; ci < chunks; ci++) {
      int64_t n0 = ci * chunk, images = g.n - n0 < chunk ? g.n - n0 : chunk;
      float *ys = (float *)y->data + n0 * pq * g.k;  // (images * P * Q, K)
      float *col = conv_chunk_col(&g, p, x, n0, images, own);
      int64_t rows = images * pq;
      if (bias)
        for (int64_t i = 0; i < rows; i++) memcpy(ys + i * g.k, bias->data, (size_t)g.k * sizeof(float));
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)rows, (int)g.k, (int)rsc, 1.0f,
                  col, (int)rsc, w->data, (int)rsc, bias ? 1.0f : 0.0f, ys, (int)g.k);
    }
    conv_thread_col_free(own, scratch);
  }
}

void op_conv2d_bwd_data_cpu(const Device *dev, const Tensor *dy, const Tensor *w,
                            const Tensor *dx, const ConvParams *p, void *scratch,
                            size_t scratch_bytes) {
  (void)dev;
  ConvGeometry g = conv_geometry("op_conv2d_bwd_data", dx, w, dy, p);
  OP_REQUIRE("op_conv2d_bwd_data", dx->dtype == DT_F32);
  int64_t chunk = conv_chunk_images("op_conv2d_bwd_data", &g, p, scratch_bytes);
  ConvLib lib;
  if (conv_library(CONV_DNNL_BWD_DATA, &g, p, false, &lib)) {
    conv_lib_apply(&lib, &g, dy->data, g.p * g.q * g.k, w->data, NULL, dx->data, g.h * g.w * g.c);
    return;
  }
  int64_t rsc = g.r * g.s * g.c, pq = g.p * g.q, chunks = parallel_pieces(g.n, chunk);
  bool pointwise = conv_is_pointwise(&g, p);
  size_t col_bytes = pointwise ? 0 : (size_t)chunk * conv_col_image_bytes(&g);
#pragma omp parallel if (CONV_PARALLEL(g, chunks))
  {
    float *own = conv_thread_col(scratch, col_bytes);
#pragma omp for
    for (int64_t ci = 0; ci < chunks; ci++) {
      int64_t n0 = ci * chunk, images = g.n - n0 < chunk ? g.n - n0 : chunk;
      float *dxs = (float *)dx->data + n0 * g.h * g.w * g.c;  // (images, H, W, C)
      float *dys = (float *)dy->data + n0 * pq * g.k;         // (images * P * Q, K)
      float *dcol = pointwise ? dxs : own;                    // (images * P * Q, R * S * C)
      int64_t rows = images * pq;
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)rsc, (int)g.k, 1.0f,
                  dys, (int)g.k, w->data, (int)rsc, 0.0f, dcol, (int)rsc);
      if (pointwise) continue;
      memset(dxs, 0, (size_t)(images * g.h * g.w * g.c) * sizeof(float));
      conv_im2col(dxs, dcol, &g, p, images, false);
    }
    conv_thread_col_free(own, scratch);
  }
}

// The filter gradient sums over every chunk. Chunk i goes to lane i %
// CONV_LANES; each lane sums its chunks in order (lane 0 into dw itself, the
// others into buffers of their own), and the lanes are then added in order:
// a decomposition fixed by the data, so any number of threads (up to
// CONV_LANES at work) gives the same bits.
enum { CONV_LANES = 8 };

// total += each of the `count` arrays of n floats at parts, in order (the
// lanes after the first).
static void conv_add_lanes(float *total, const float *parts, int64_t count, int64_t n) {
  for (int64_t lane = 0; lane < count; lane++) {
    const float *part = parts + lane * n;
#pragma omp parallel for if (n >= parallel_min_work)
    for (int64_t i = 0; i < n; i++) total[i] += part[i];
  }
}

// The same lanes for oneDNN, whose chunk gradients come in the kernels'
// layout: the lanes sum in it, and their total is turned into KRSC at the end.
static void conv_lib_filter(const ConvLib *lib, const ConvGeometry *g, const float *x,
                            const float *dy, const Tensor *dw, bool accumulate) {
  int64_t lanes = lib->chunks < CONV_LANES ? lib->chunks : CONV_LANES;
  int64_t fn = (int64_t)(lib->filter_bytes / sizeof(float));
  float *sums = xmalloc((size_t)lanes * lib->filter_bytes);
#pragma omp parallel if (CONV_PARALLEL(*g, lib->chunks))
  {
    // The thread's buffer: oneDNN's scratch, then one chunk's gradient.
    char *own = conv_lib_own(lib, lib->filter_bytes);
    float *one = (float *)(own + lib->scratch_bytes);
#pragma omp for schedule(static, 1)
    for (int64_t lane = 0; lane < lanes; lane++) {
      float *sum = sums + lane * fn;
      for (int64_t ci = lane; ci < lib->chunks; ci += lanes) {
        CONV_LIB_CHUNK(lib, g, ci, n0, images);
        conv_dnnl_run(prim, x + n0 * g->h * g->w * g->c, dy + n0 * g->p * g->q * g->k, NULL,
                      ci < lanes ? sum : one, own);
        conv_lib_guard_check(lib, g, own);
        if (ci >= lanes)
          for (int64_t i = 0; i < fn; i++) sum[i] += one[i];
      }
    }
    free(own);
  }
  conv_add_lanes(sums, sums + fn, lanes - 1, fn);
  int64_t wn = tensor_numel(dw);
  float *krsc = accumulate ? xmalloc((size_t)wn * sizeof(float)) : dw->data, *pdw = dw->data;
  conv_dnnl_filter(lib->prim[0], sums, krsc);
  if (accumulate)
    for (int64_t i = 0; i < wn; i++) pdw[i] += krsc[i];
  if (accumulate) free(krsc);
  free(sums);
}

void op_conv2d_bwd_filter_cpu(const Device *dev, const Tensor *x, const Tensor *dy,
                              const Tensor *dw, const ConvParams *p, bool accumulate,
                              void *scratch, size_t scratch_bytes) {
  (void)dev;
  ConvGeometry g = conv_geometry("op_conv2d_bwd_filter", x, dw, dy, p);
  OP_REQUIRE("op_conv2d_bwd_filter", x->dtype == DT_F32);
  if (g.n == 0 && !accumulate) memset(dw->data, 0, tensor_bytes(dw));  // an empty sum
  int64_t chunk = conv_chunk_images("op_conv2d_bwd_filter", &g, p, scratch_bytes);
  ConvLib lib;
  if (conv_library(CONV_DNNL_BWD_FILTER, &g, p, false, &lib)) {
    conv_lib_filter(&lib, &g, x->data, dy->data, dw, accumulate);
    return;
  }
  int64_t rsc = g.r * g.s * g.c, pq = g.p * g.q, chunks = parallel_pieces(g.n, chunk);
  int64_t lanes = chunks < CONV_LANES ? chunks : CONV_LANES, wn = g.k * rsc;
  size_t col_bytes = conv_is_pointwise(&g, p) ? 0 : (size_t)chunk * conv_col_image_bytes(&g);
  float *partial = lanes > 1 ? xmalloc((size_t)((lanes - 1) * wn) * sizeof(float)) : NULL;
#pragma omp parallel if (CONV_PARALLEL(g, chunks))
  {
    float *own = conv_thread_col(scratch, col_bytes);
#pragma omp for schedule(static, 1)
    for (int64_t lane = 0; lane < lanes; lane++) {
      float *sum = lane == 0 ? dw->data : partial + (lane - 1) * wn;
      for (int64_t ci = lane; ci < chunks; ci += lanes) {
        int64_t n0 = ci * chunk, images = g.n - n0 < chunk ? g.n - n0 : chunk;
        float *dys = (float *)dy->data + n0 * pq * g.k;  // (images * P * Q, K)
        float *col = conv_chunk_col(&g, p, x, n0, images, own);
        float beta = ci >= lanes || (lane == 0 && accumulate) ? 1.0f : 0.0f;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)g.k, (int)rsc, (int)(images * pq),
                    1.0f, dys, (int)g.k, col, (int)rsc, beta, sum, (int)rsc);
      }
    }
    conv_thread_col_free(own, scratch);
  }
  conv_add_lanes(dw->data, partial, lanes - 1, wn);
  free(partial);
}

// ---------------------------------------------------------------- CPU: ReLU

void op_relu_fwd_cpu(const Device *dev, const Tensor *x, const Tensor *y) {
  (void)dev;
  int64_t n = tensor_numel(x);
  OP_REQUIRE("op_relu_fwd", x->dtype == DT_F32 && y->dtype == DT_F32 && tensor_numel(y) == n);
  const float *px = x->data;
  float *py = y->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) py[i] = px[i] > 0 ? px[i] : 0.0f;
}

void op_relu_bwd_cpu(const Device *dev, const Tensor *y, const Tensor *dy, const Tensor *dx) {
  (void)dev;
  int64_t n = tensor_numel(y);
  OP_REQUIRE("op_relu_bwd", y->dtype == DT_F32 && dy->dtype == DT_F32 && dx->dtype == DT_F32);
  OP_REQUIRE("op_relu_bwd", tensor_numel(dy) == n && tensor_numel(dx) == n);
  const float *py = y->data, *pdy = dy->data;
  float *pdx = dx->data;
#pragma omp parallel for if (n >= parallel_min_work)
  for (int64_t i = 0; i < n; i++) {
    float d = pdy[i];  // read wherever y is: the loop vectorises
    pdx[i] = py[i] > 0 ? d : 0.0f;
  }
}
