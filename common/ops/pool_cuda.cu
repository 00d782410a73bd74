// pool_cuda.cu: the CUDA side of pool.h, own NHWC kernels on dev->stream.
#include "ops/cuda_channels.cuh"
#include "ops/pool.h"

// ---------------------------------------------------------------- pooling
// Own NHWC kernels rather than cuDNN's pooling: they follow the CPU's rules
// exactly in every dtype (max: NaN never wins, the gradient goes to the
// first position holding the maximum; average: padding counts as zero), and
// the backward gathers instead of scattering, so it needs no atomics and adds
// each input's terms in the CPU's order. One thread per element; the
// channel is the fastest index, so a warp reads contiguous memory.

typedef struct PoolShape {
  int64_t n, h, w, c, p, q;
  int window_h, window_w, stride_h, stride_w, pad_h, pad_w;
} PoolShape;

static PoolShape pool_shape(const ConvGeometry *g, const PoolParams *pp) {
  PoolShape s = {g->n, g->h, g->w, g->c, g->p, g->q, pp->window_h, pp->window_w,
                 pp->stride_h, pp->stride_w, pp->pad_h, pp->pad_w};
  return s;
}

// The input rows [*h0, *h1) and columns [*w0, *w1) of output (oh, ow)'s window.
static __device__ void pool_window_dev(const PoolShape &s, int64_t oh, int64_t ow, int64_t *h0,
                                       int64_t *h1, int64_t *w0, int64_t *w1) {
  int64_t hs = oh * s.stride_h - s.pad_h, ws = ow * s.stride_w - s.pad_w;
  *h0 = hs < 0 ? 0 : hs;
  *w0 = ws < 0 ? 0 : ws;
  *h1 = hs + s.window_h < s.h ? hs + s.window_h : s.h;
  *w1 = ws + s.window_w < s.w ? ws + s.window_w : s.w;
}

// The outputs whose windows hold input row i along one axis: [*o0, *o1).
static __device__ void pool_covering(int64_t i, int stride, int pad, int window, int64_t out,
                                     int64_t *o0, int64_t *o1) {
  int64_t lo = i + pad - window + 1;  // o * stride >= lo
  *o0 = lo <= 0 ? 0 : (lo + stride - 1) / stride;
  int64_t hi = (i + pad) / stride + 1;  // o * stride <= i + pad
  *o1 = hi < out ? hi : out;
}

// Both kernels give each thread V neighbouring channels of one pixel
// (cuda_channels.cuh: 16-byte accesses when the channel count and the
// pointers allow); the index arithmetic and the window scans are shared by
// the V.
template <typename T, bool kMax, int V>
__global__ void pool_fwd_kernel(const T *x, T *y, PoolShape s) {
  int64_t groups = s.c / V, total = s.n * s.p * s.q * groups;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c0 = i % groups * V, pixel = i / groups;  // pixel: (n, oh, ow)
    int64_t ow = pixel % s.q, oh = pixel / s.q % s.p, n = pixel / (s.q * s.p);
    int64_t h0, h1, w0, w1;
    pool_window_dev(s, oh, ow, &h0, &h1, &w0, &w1);
    float acc[V], v[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = kMax ? -INFINITY : 0.0f;
    for (int64_t ih = h0; ih < h1; ih++)
      for (int64_t iw = w0; iw < w1; iw++) {
        ops_pack_load<T, V>(x + ((n * s.h + ih) * s.w + iw) * s.c + c0, v);
#pragma unroll
        for (int k = 0; k < V; k++)
          acc[k] = kMax ? (v[k] > acc[k] ? v[k] : acc[k]) : __fadd_rn(acc[k], v[k]);
      }
    if (!kMax) {
      float inv_area = 1.0f / (float)(s.window_h * s.window_w);
#pragma unroll
      for (int k = 0; k < V; k++) acc[k] = __fmul_rn(acc[k], inv_area);
    }
    ops_pack_store<T, V>(y + pixel * s.c + c0, acc);
  }
}

// dx at each input: the sum over the outputs covering it (in row-major
// output order) of dy, where max pooling counts an output only when this
// input is the first in its window holding the output's value. That test
// reads the input once, and the positions before it in the window only for
// an output whose value it holds (in some of its V channels); dy only for
// an output it counts.
template <typename T, bool kMax, int V>
__global__ void pool_bwd_kernel(const T *x, const T *y, const T *dy, T *dx, PoolShape s) {
  int64_t groups = s.c / V, total = s.n * s.h * s.w * groups;
  float inv_area = 1.0f / (float)(s.window_h * s.window_w);
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
       i += (int64_t)gridDim.x * blockDim.x) {
    int64_t c0 = i % groups * V, pixel = i / groups;  // pixel: (n, ih, iw)
    int64_t iw = pixel % s.w, ih = pixel / s.w % s.h, n = pixel / (s.w * s.h);
    int64_t oh0, oh1, ow0, ow1;
    pool_covering(ih, s.stride_h, s.pad_h, s.window_h, s.p, &oh0, &oh1);
    pool_covering(iw, s.stride_w, s.pad_w, s.window_w, s.q, &ow0, &ow1);
    float acc[V], g[V], top[V], v[V], own[V];
#pragma unroll
    for (int k = 0; k < V; k++) acc[k] = 0.0f;
    if (kMax) ops_pack_load<T, V>(x + pixel * s.c + c0, own);
    for (int64_t oh = oh0; oh < oh1; oh++)
      for (int64_t ow = ow0; ow < ow1; ow++) {
        int64_t o = ((n * s.p + oh) * s.q + ow) * s.c + c0;
        if (kMax) {
          // Per channel: this input holds the output's value, and no
          // position before it in the window (row-major) does.
          ops_pack_load<T, V>(y + o, top);
          bool mine[V], any = false;
#pragma unroll
          for (int k = 0; k < V; k++) mine[k] = own[k] == top[k], any |= mine[k];
          int64_t h0, h1, w0, w1;
          pool_window_dev(s, oh, ow, &h0, &h1, &w0, &w1);
          for (int64_t jh = h0; jh <= ih && any; jh++)
            for (int64_t jw = w0; jw < (jh == ih ? iw : w1) && any; jw++) {
              ops_pack_load<T, V>(x + ((n * s.h + jh) * s.w + jw) * s.c + c0, v);
              any = false;
#pragma unroll
              for (int k = 0; k < V; k++) {
                if (v[k] == top[k]) mine[k] = false;
                any |= mine[k];
              }
            }
          if (!any) continue;
          ops_pack_load<T, V>(dy + o, g);
#pragma unroll
          for (int k = 0; k < V; k++)
            if (mine[k]) acc[k] = __fadd_rn(acc[k], g[k]);
        } else {
          ops_pack_load<T, V>(dy + o, g);
#pragma unroll
          for (int k = 0; k < V; k++) acc[k] = __fadd_rn(acc[k], __fmul_rn(g[k], inv_area));
        }
      }
    ops_pack_store<T, V>(dx + pixel * s.c + c0, acc);
  }
}

template <bool kMax>
static void pool_fwd_cuda(const Device *dev, const char *op, const Tensor *x, const Tensor *y,
                          const PoolParams *p) {
  ConvGeometry g = pool_geometry(op, x, y, p);
  PoolShape s = pool_shape(&g, p);
  int64_t total = tensor_numel(y);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH(op, x->dtype, {
    typedef scalar_t T;
    constexpr int kWide = 16 / sizeof(T);
    const T *px = (const T *)x->data;
    T *py = (T *)y->data;
    if (ops_channel_width<T>(s.c, {px, py}) > 1)
      pool_fwd_kernel<T, kMax, kWide>
          <<<ops_blocks(total / kWide, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, s);
    else
      pool_fwd_kernel<T, kMax, 1>
          <<<ops_blocks(total, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, s);
  });
  CHECK_LAUNCH();
}

// x and y are read by max pooling only (NULL for the average).
template <bool kMax>
static void pool_bwd_cuda(const Device *dev, const char *op, const Tensor *x, const Tensor *y,
                          const Tensor *dy, const Tensor *dx, const PoolParams *p) {
  ConvGeometry g = pool_geometry(op, dx, dy, p);
  OP_REQUIRE(op, dy->dtype == dx->dtype);
  OP_REQUIRE(op, !kMax || (x->dtype == dx->dtype && y->dtype == dx->dtype));
  PoolShape s = pool_shape(&g, p);
  int64_t total = tensor_numel(dx);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH(op, dx->dtype, {
    typedef scalar_t T;
    constexpr int kWide = 16 / sizeof(T);
    const T *px = kMax ? (const T *)x->data : NULL, *py = kMax ? (const T *)y->data : NULL;
    const T *pdy = (const T *)dy->data;
    T *pdx = (T *)dx->data;
    if (ops_channel_width<T>(s.c, {px, py, pdy, pdx}) > 1)
      pool_bwd_kernel<T, kMax, kWide>
          <<<ops_blocks(total / kWide, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(
              px, py, pdy, pdx, s);
    else
      pool_bwd_kernel<T, kMax, 1>
          <<<ops_blocks(total, OPS_THREADS), OPS_THREADS, 0, dev->stream>>>(px, py, pdy, pdx, s);
  });
  CHECK_LAUNCH();
}

void op_maxpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                         const PoolParams *p) {
  pool_fwd_cuda<true>(dev, "op_maxpool_fwd", x, y, p);
}

void op_maxpool_bwd_cuda(const Device *dev, const Tensor *x, const Tensor *y, const Tensor *dy,
                         const Tensor *dx, const PoolParams *p) {
  OP_REQUIRE("op_maxpool_bwd", tensor_same_shape(dy, y) && tensor_same_shape(dx, x));
  pool_bwd_cuda<true>(dev, "op_maxpool_bwd", x, y, dy, dx, p);
}

void op_avgpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y,
                         const PoolParams *p) {
  pool_fwd_cuda<false>(dev, "op_avgpool_fwd", x, y, p);
}

void op_avgpool_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx,
                         const PoolParams *p) {
  pool_bwd_cuda<false>(dev, "op_avgpool_bwd", NULL, NULL, dy, dx, p);
}

// ---------------------------------------------------------------- global average pool

// One thread per (n, c); neighbouring threads read neighbouring channels.
template <typename T>
__global__ void gap_fwd_kernel(const T *x, T *y, int64_t n, int64_t area, int64_t c) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n * c; i += stride) {
    const T *img = x + (i / c) * area * c + i % c;
    float acc = 0;
    for (int64_t a = 0; a < area; a++) acc += ops_f32(img[a * c]);
    y[i] = ops_from_f32<T>(acc / (float)area);
  }
}

template <typename T>
__global__ void gap_bwd_kernel(const T *dy, T *dx, int64_t total, int64_t area, int64_t c) {
  int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
    int64_t img = i / (area * c);
    dx[i] = ops_from_f32<T>(ops_f32(dy[img * c + i % c]) / (float)area);
  }
}

static void gap_check(const char *op, const Tensor *x, const Tensor *y) {
  OP_REQUIRE(op, x->ndim == 4 && y->ndim == 2 && x->dtype == y->dtype);
  OP_REQUIRE(op, y->shape[0] == x->shape[0] && y->shape[1] == x->shape[3]);
  OP_REQUIRE(op, x->shape[1] * x->shape[2] >= 1);
}

void op_global_avgpool_fwd_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  gap_check("op_global_avgpool_fwd", x, y);
  int64_t n = x->shape[0], area = x->shape[1] * x->shape[2], c = x->shape[3];
  if (n * c == 0) return;
  OPS_FLOAT_DISPATCH("op_global_avgpool_fwd", x->dtype, {
    typedef scalar_t T;
    gap_fwd_kernel<T><<<ops_blocks(n * c, 256), 256, 0, dev->stream>>>(
        (const T *)x->data, (T *)y->data, n, area, c);
  });
  CHECK_LAUNCH();
}

void op_global_avgpool_bwd_cuda(const Device *dev, const Tensor *dy, const Tensor *dx) {
  gap_check("op_global_avgpool_bwd", dx, dy);
  int64_t area = dx->shape[1] * dx->shape[2], c = dx->shape[3], total = tensor_numel(dx);
  if (total == 0) return;
  OPS_FLOAT_DISPATCH("op_global_avgpool_bwd", dx->dtype, {
    typedef scalar_t T;
    gap_bwd_kernel<T><<<ops_blocks(total, 256), 256, 0, dev->stream>>>(
        (const T *)dy->data, (T *)dx->data, total, area, c);
  });
  CHECK_LAUNCH();
}
