// norm_cuda.cu: the CUDA side of norm.h. Layer norm is a warp per row up to
// 1,024 columns (the row in registers, sums by shuffles), a block per row
// beyond; batch norm's own kernels fuse the residual add and the ReLU for
// every dtype and give bit-reproducible statistics. Everything runs on
// dev->stream.
#include "core/rng.h"
#include "ops/cuda_channels.cuh"
#include "ops/norm.h"

// ---------------------------------------------------------------- layer norm
template <typename T>
static __global__ void layernorm_fwd_kernel(const T *x, const float *gamma,
                                            const float *beta, float eps, int64_t cols,
                                            T *y, float *mean, float *rstd) {
  __shared__ float shared[32];
  const T *row = x + blockIdx.x * cols;
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) sum += ops_f32(row[j]);
  float mu = ops_block_sum(sum, shared) / (float)cols;
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = ops_f32(row[j]) - mu;
    sq += d * d;
  }
  float rs = rsqrtf(ops_block_sum(sq, shared) / (float)cols + eps);
  T *out = y + blockIdx.x * cols;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[j] = ops_from_f32<T>((ops_f32(row[j]) - mu) * rs * gamma[j] + beta[j]);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}

// Rows of at most LN_WARP_COLS columns: a warp per row, the row in its
// lanes' registers (column j = lane + 32 k in v[k]), read once; the sums
// by shuffles, no block barrier. kResidual: the row is x + dropout(y),
// rounded to T once and written to sum (op_residual_layernorm_fwd).
#define LN_WARP_COLS 1024
#define LN_WARPS (OPS_THREADS / 32)
template <typename T, int kPer, bool kResidual>
static __global__ void layernorm_fwd_warp_kernel(const T *x, const T *y, float keep_prob,
                                                 uint64_t seed, uint64_t stream,
                                                 const float *gamma, const float *beta,
                                                 float eps, int64_t rows, int64_t cols, T *sum,
                                                 T *out, float *mean, float *rstd) {
  int lane = threadIdx.x & 31;
  int64_t r = (int64_t)blockIdx.x * LN_WARPS + (threadIdx.x >> 5);
  if (r >= rows) return;  // the whole warp: no barrier follows
  int64_t base = r * cols;
  float v[kPer], acc = 0.0f, scale = 1.0f / keep_prob;
  for (int k = 0; k < kPer; k++) {
    int64_t j = lane + 32 * k;
    v[k] = 0.0f;
    if (j >= cols) continue;
    v[k] = ops_f32(x[base + j]);
    if (kResidual) {
      float d = ops_f32(y[base + j]);
      if (keep_prob < 1.0f)
        d = rng_bernoulli(seed, stream, (uint64_t)(base + j), keep_prob) ? d * scale : 0.0f;
      T s = ops_from_f32<T>(v[k] + d);
      sum[base + j] = s;
      v[k] = ops_f32(s);
    }
    acc += v[k];
  }
  float mu = ops_warp_sum(acc) / (float)cols, sq = 0.0f;
  for (int k = 0; k < kPer; k++)
    if (lane + 32 * k < cols) sq += (v[k] - mu) * (v[k] - mu);
  float rs = rsqrtf(ops_warp_sum(sq) / (float)cols + eps);
  for (int k = 0; k < kPer; k++) {
    int64_t j = lane + 32 * k;
    if (j < cols) out[base + j] = ops_from_f32<T>((v[k] - mu) * rs * gamma[j] + beta[j]);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// Runs the statement with kPer bound to the registers a lane needs for
// cols (a power of two, cols <= 32 kPer <= LN_WARP_COLS).
#define LN_PER_DISPATCH(cols, ...)                      \
  do {                                                 \
    int64_t per_ = ((cols) + 31) / 32;                 \
    if (per_ <= 1) {                                   \
      constexpr int kPer = 1;                          \
      __VA_ARGS__;                                     \
    } else if (per_ <= 2) {                            \
      constexpr int kPer = 2;                          \
      __VA_ARGS__;                                     \
    } else if (per_ <= 4) {                            \
      constexpr int kPer = 4;                          \
      __VA_ARGS__;                                     \
    } else if (per_ <= 8) {                            \
      constexpr int kPer = 8;                          \
      __VA_ARGS__;                                     \
    } else if (per_ <= 16) {                           \
      constexpr int kPer = 16;                         \
      __VA_ARGS__;                                     \
    } else {                                           \
      constexpr int kPer = 32;                         \
      __VA_ARGS__;                                     \
    }                                                  \
  } while (0)

// The warp kernel's launch for rows of at most LN_WARP_COLS columns.
template <typename T, int kPer, bool kResidual>
static void layernorm_fwd_warp_launch(const Device *dev, const T *x, const T *y, float keep_prob,
                                      uint64_t seed, uint64_t stream, const float *gamma,
                                      const float *beta, float eps, int64_t rows, int64_t cols,
                                      T *sum, T *out, float *mean, float *rstd) {
  unsigned blocks = (unsigned)((rows + LN_WARPS - 1) / LN_WARPS);
  layernorm_fwd_warp_kernel<T, kPer, kResidual><<<blocks, OPS_THREADS, 0, dev->stream>>>(
      x, y, keep_prob, seed, stream, gamma, beta, eps, rows, cols, sum, out, mean, rstd);
}
template <typename T, bool kResidual>
static void layernorm_fwd_warp(const Device *dev, const T *x, const T *y, float keep_prob,
                               uint64_t seed, uint64_t stream, const float *gamma,
                               const float *beta, float eps, int64_t rows, int64_t cols, T *sum,
                               T *out, float *mean, float *rstd) {
  LN_PER_DISPATCH(cols, (layernorm_fwd_warp_launch<T, kPer, kResidual>(
                            dev, x, y, keep_prob, seed, stream, gamma, beta, eps, rows, cols,
                            sum, out, mean, rstd)));
}

extern "C" void op_layernorm_fwd_cuda(const Device *dev, const Tensor *x,
                                      const Tensor *gamma, const Tensor *beta, float eps,
                                      const Tensor *y, const Tensor *mean,
                                      const Tensor *rstd) {
  op_layernorm_check(x, gamma, y, mean, rstd);
  OP_REQUIRE("op_layernorm_fwd", tensor_same_shape(beta, gamma));
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  if (rows == 0) return;
  if (cols <= LN_WARP_COLS) {
    OPS_FLOAT_DISPATCH("op_layernorm_fwd", x->dtype,
                       layernorm_fwd_warp<scalar_t, false>(
                           dev, (const scalar_t *)x->data, NULL, 1.0f, 0, 0,
                           (const float *)gamma->data, (const float *)beta->data, eps, rows, cols,
                           NULL, (scalar_t *)y->data, (float *)mean->data, (float *)rstd->data));
    CHECK_LAUNCH();
    return;
  }
  OPS_FLOAT_DISPATCH("op_layernorm_fwd", x->dtype, {
    layernorm_fwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)x->data, (const float *)gamma->data, (const float *)beta->data,
        eps, cols, (scalar_t *)y->data, (float *)mean->data, (float *)rstd->data);
  });
  CHECK_LAUNCH();
}

// sum = x + dropout(y), rounded to T once, then the layer norm of that row
// as stored: the first pass writes sum, the other two read back each
// thread's own elements (no barrier needed between them).
template <typename T>
static __global__ void residual_layernorm_fwd_kernel(const T *x, const T *y, float keep_prob,
                                                     uint64_t seed, uint64_t stream,
                                                     const float *gamma, const float *beta,
                                                     float eps, int64_t cols, T *sum, T *out,
                                                     float *mean, float *rstd) {
  __shared__ float shared[32];
  int64_t base = (int64_t)blockIdx.x * cols;
  float scale = 1.0f / keep_prob, acc = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = ops_f32(y[base + j]);
    if (keep_prob < 1.0f) v = rng_bernoulli(seed, stream, (uint64_t)(base + j), keep_prob) ? v * scale : 0.0f;
    T s = ops_from_f32<T>(ops_f32(x[base + j]) + v);
    sum[base + j] = s;
    acc += ops_f32(s);
  }
  float mu = ops_block_sum(acc, shared) / (float)cols, sq = 0.0f;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float d = ops_f32(sum[base + j]) - mu;
    sq += d * d;
  }
  float rs = rsqrtf(ops_block_sum(sq, shared) / (float)cols + eps);
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x)
    out[base + j] = ops_from_f32<T>((ops_f32(sum[base + j]) - mu) * rs * gamma[j] + beta[j]);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = rs;
  }
}

extern "C" void op_residual_layernorm_fwd_cuda(const Device *dev, const Tensor *x,
                                               const Tensor *y, float keep_prob, uint64_t seed,
                                               uint64_t stream, const Tensor *gamma,
                                               const Tensor *beta, float eps, const Tensor *sum,
                                               const Tensor *out, const Tensor *mean,
                                               const Tensor *rstd) {
  const char *name = "op_residual_layernorm_fwd";
  op_layernorm_check(sum, gamma, out, mean, rstd);
  OP_REQUIRE(name, tensor_same_shape(beta, gamma) && keep_prob > 0.0f && keep_prob <= 1.0f);
  OP_REQUIRE(name, tensor_same_shape(x, sum) && tensor_same_shape(y, sum) &&
                       x->dtype == sum->dtype && y->dtype == sum->dtype);
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  if (rows == 0) return;
  if (cols <= LN_WARP_COLS) {
    OPS_FLOAT_DISPATCH(name, x->dtype,
                       layernorm_fwd_warp<scalar_t, true>(
                           dev, (const scalar_t *)x->data, (const scalar_t *)y->data, keep_prob,
                           seed, stream, (const float *)gamma->data, (const float *)beta->data,
                           eps, rows, cols, (scalar_t *)sum->data, (scalar_t *)out->data,
                           (float *)mean->data, (float *)rstd->data));
    CHECK_LAUNCH();
    return;
  }
  OPS_FLOAT_DISPATCH(name, x->dtype, {
    residual_layernorm_fwd_kernel<<<(unsigned)rows, OPS_THREADS, 0, dev->stream>>>(
        (const scalar_t *)x->data, (const scalar_t *)y->data, keep_prob, seed, stream,
        (const float *)gamma->data, (const float *)beta->data, eps, cols, (scalar_t *)sum->data,
        (scalar_t *)out->data, (float *)mean->data, (float *)rstd->data);
  });
  CHECK_LAUNCH();
}

// Block g takes rows g, g + G, ...: writes their dx and its partial column
// sums of dy xhat (dgamma) and dy (dbeta) to partials[g] and partials[G + g].
// Each thread owns the columns j = threadIdx.x + k blockDim.x of the shared
// accumulators, so the sums need no atomics and their order is fixed.
template <typename T>
static __global__ void layernorm_bwd_kernel(const T *x, const float *gamma,
                                            const float *mean, const float *rstd,
                                            const T *dy, int64_t rows, int64_t cols,
                                            T *dx, float *partials) {
  extern __shared__ float acc[];  // (2, cols): dgamma, dbeta
  __shared__ float shared[32];
  for (int64_t j = threadIdx.x; j < 2 * cols; j += blockDim.x) acc[j] = 0.0f;
  __syncthreads();  // acc[cols + j] is zeroed by another thread than its owner
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T *xr = x + r * cols, *gr = dy + r * cols;
    float mu = mean[r], rs = rstd[r], sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float g = ops_f32(gr[j]) * gamma[j], xhat = (ops_f32(xr[j]) - mu) * rs;
      sum_g += g;
      sum_gx += g * xhat;
    }
    float mean_g = ops_block_sum(sum_g, shared) / (float)cols;
    float mean_gx = ops_block_sum(sum_gx, shared) / (float)cols;
    for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
      float d = ops_f32(gr[j]), xhat = (ops_f32(xr[j]) - mu) * rs;
      dx[r * cols + j] = ops_from_f32<T>(rs * (d * gamma[j] - mean_g - xhat * mean_gx));
      acc[j] += d * xhat;
      acc[cols + j] += d;
    }
  }
  __syncthreads();
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    partials[blockIdx.x * cols + j] = acc[j];
    partials[(gridDim.x + blockIdx.x) * cols + j] = acc[cols + j];
  }
}

// Rows of at most LN_WARP_COLS columns: a warp per row, warps numbered
// across the grid (block g's warp w is w_g = LN_WARPS g + w) taking rows
// w_g, w_g + LN_WARPS G, ...; each lane keeps its columns' dgamma and dbeta
// sums over its rows in registers; the block's warps then add theirs into
// shared memory in warp order and the block writes partials[g] and
// partials[G + g] as layernorm_bwd_kernel does. A fixed order everywhere.
template <typename T, int kPer>
static __global__ void layernorm_bwd_warp_kernel(const T *x, const float *gamma,
                                                 const float *mean, const float *rstd,
                                                 const T *dy, int64_t rows, int64_t cols,
                                                 T *dx, float *partials) {
  __shared__ float acc[2 * LN_WARP_COLS];  // dgamma, dbeta
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float dg[kPer], db[kPer];
  for (int k = 0; k < kPer; k++) dg[k] = db[k] = 0.0f;
  int64_t stride = (int64_t)gridDim.x * LN_WARPS;
  for (int64_t r = (int64_t)blockIdx.x * LN_WARPS + warp; r < rows; r += stride) {
    int64_t base = r * cols;
    float mu = mean[r], rs = rstd[r], xhat[kPer], d[kPer], sum_g = 0.0f, sum_gx = 0.0f;
    for (int k = 0; k < kPer; k++) {
      int64_t j = lane + 32 * k;
      xhat[k] = d[k] = 0.0f;
      if (j >= cols) continue;
      xhat[k] = (ops_f32(x[base + j]) - mu) * rs;
      d[k] = ops_f32(dy[base + j]);
      float g = d[k] * gamma[j];
      sum_g += g;
      sum_gx += g * xhat[k];
    }
    float mean_g = ops_warp_sum(sum_g) / (float)cols;
    float mean_gx = ops_warp_sum(sum_gx) / (float)cols;
    for (int k = 0; k < kPer; k++) {
      int64_t j = lane + 32 * k;
      if (j >= cols) continue;
      dx[base + j] = ops_from_f32<T>(rs * (d[k] * gamma[j] - mean_g - xhat[k] * mean_gx));
      dg[k] += d[k] * xhat[k];
      db[k] += d[k];
    }
  }
  for (int w = 0; w < LN_WARPS; w++) {  // the warps' sums, in warp order
    if (warp == w)
      for (int k = 0; k < kPer; k++) {
        int64_t j = lane + 32 * k;
        if (j >= cols) continue;
        acc[j] = w ? acc[j] + dg[k] : dg[k];
        acc[LN_WARP_COLS + j] = w ? acc[LN_WARP_COLS + j] + db[k] : db[k];
      }
    __syncthreads();
  }
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    partials[blockIdx.x * cols + j] = acc[j];
    partials[(gridDim.x + blockIdx.x) * cols + j] = acc[LN_WARP_COLS + j];
  }
}

template <typename T, int kPer>
static void layernorm_bwd_warp_launch(const Device *dev, const T *x, const float *gamma,
                                      const float *mean, const float *rstd, const T *dy,
                                      int64_t rows, int64_t cols, T *dx, float *partials) {
  layernorm_bwd_warp_kernel<T, kPer><<<OPS_REDUCE_GROUPS, OPS_THREADS, 0, dev->stream>>>(
      x, gamma, mean, rstd, dy, rows, cols, dx, partials);
}

extern "C" void op_layernorm_bwd_cuda(const Device *dev, const Tensor *x,
                                      const Tensor *gamma, const Tensor *mean,
                                      const Tensor *rstd, const Tensor *dy,
                                      const Tensor *dx, const Tensor *dgamma,
                                      const Tensor *dbeta, bool accumulate) {
  op_layernorm_check(x, gamma, dy, mean, rstd);
  OP_REQUIRE("op_layernorm_bwd", tensor_same_shape(dx, dy));
  OP_REQUIRE("op_layernorm_bwd",
             tensor_same_shape(dgamma, gamma) && tensor_same_shape(dbeta, gamma));
  int64_t rows = op_rows(x), cols = op_last_dim(x);
  size_t shared_bytes = 2 * (size_t)cols * sizeof(float);
  // 48 KiB per block without an opt-in, the kernel's static 32 floats included.
  OP_REQUIRE("op_layernorm_bwd", shared_bytes + 32 * sizeof(float) <= 48 * 1024);
  float *partials =
      ops_workspace_floats(dev, 2 * OPS_REDUCE_GROUPS * cols, "op_layernorm_bwd");
  if (cols <= LN_WARP_COLS) {
    OPS_FLOAT_DISPATCH("op_layernorm_bwd", x->dtype,
                       LN_PER_DISPATCH(cols, (layernorm_bwd_warp_launch<scalar_t, kPer>(
                                                 dev, (const scalar_t *)x->data,
                                                 (const float *)gamma->data,
                                                 (const float *)mean->data,
                                                 (const float *)rstd->data,
                                                 (const scalar_t *)dy->data, rows, cols,
                                                 (scalar_t *)dx->data, partials))));
  } else {
    OPS_FLOAT_DISPATCH("op_layernorm_bwd", x->dtype, {
      layernorm_bwd_kernel<<<OPS_REDUCE_GROUPS, OPS_THREADS, shared_bytes, dev->stream>>>(
          (const scalar_t *)x->data, (const float *)gamma->data, (const float *)mean->data,
          (const float *)rstd->data, (const scalar_t *)dy->data, rows, cols,
          (scalar_t *)dx->data, partials);
    });
  }
  CHECK_LAUNCH();
  ops_colsum_finalize(dev, partials, OPS_REDUCE_GROUPS, cols, (float *)dgamma->data,
                      accumulate);
  ops_colsum_finalize(dev, partials + OPS_REDUCE_GROUPS * cols, OPS_REDUCE_GROUPS, cols,
                      (float *)dbeta->data, accumulate);
}

// ---------------------------------------------------------------- batch norm

// The kernels below map channels to threads along x and rows along y, V
// neighbouring channels to a thread (cuda_channels.cuh). In NHWC a row's
// channels are contiguous, so the threads of a warp read whole rows in
// 16-byte pieces.

// Per-channel partial sums over row parts, the layout of the reductions in
// reduce_cuda.cu: block (cw, 256 / cw) covers cw * V channels; blockIdx.y
// is the part; lanes along y add up in a fixed tree. Two sums per channel.
template <typename T>
struct BnPartialArgs {
  const T *x, *y, *dy;  // x always; y and dy for the backward
  const float *mean, *invstd;
  int64_t rows, cols, rows_per_part;
  float *part_a, *part_b;  // (parts, cols) each
  bool relu;
};

// The block's sums of a[v] and b[v] over its lanes along y (a power of two,
// blockDim.x * blockDim.y <= 256), added in a fixed tree; the threads of
// row 0 (threadIdx.y == 0) get their column's sums back in a and b. Every
// thread of the block calls it.
template <int V>
__device__ __forceinline__ void bn_lane_sums(float (&a)[V], float (&b)[V]) {
  __shared__ float lanes_a[V][256], lanes_b[V][256];
  int slot = threadIdx.y * blockDim.x + threadIdx.x;
#pragma unroll
  for (int v = 0; v < V; v++) {
    lanes_a[v][slot] = a[v];
    lanes_b[v][slot] = b[v];
  }
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half) {
      int other = slot + half * blockDim.x;
#pragma unroll
      for (int v = 0; v < V; v++) {
        lanes_a[v][slot] += lanes_a[v][other];
        lanes_b[v][slot] += lanes_b[v][other];
      }
    }
    __syncthreads();
  }
  if (threadIdx.y == 0) {
#pragma unroll
    for (int v = 0; v < V; v++) {
      a[v] = lanes_a[v][threadIdx.x];
      b[v] = lanes_b[v][threadIdx.x];
    }
  }
}

// The block's part of the per-channel sums, written to row blockIdx.y of
// part_a and part_b.
template <int V>
__device__ __forceinline__ void bn_block_pair_sums(float (&a)[V], float (&b)[V], float *part_a,
                                                   float *part_b, int64_t cols, int64_t c0) {
  bn_lane_sums<V>(a, b);
  if (threadIdx.y == 0 && c0 < cols) {
    int64_t at = (int64_t)blockIdx.y * cols + c0;
#pragma unroll
    for (int v = 0; v < V; v++) {
      part_a[at + v] = a[v];
      part_b[at + v] = b[v];
    }
  }
}

// Forward: sums of (x - s) and (x - s)^2 with s = x[0, c]. Shifting by a
// sample keeps the one-pass variance free of the cancellation that plain
// sum(x^2) - sum(x)^2 / M suffers when |mean| >> std.
template <typename T, int V>
__global__ void bn_stats_kernel(BnPartialArgs<T> a) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  float s1[V] = {}, s2[V] = {};
  if (c0 < a.cols) {
    float shift[V], x[V];
    ops_pack_load<T, V>(a.x + c0, shift);
    int64_t r1 = min(a.rows, ((int64_t)blockIdx.y + 1) * a.rows_per_part);
    for (int64_t r = (int64_t)blockIdx.y * a.rows_per_part + threadIdx.y; r < r1; r += blockDim.y) {
      ops_pack_load<T, V>(a.x + r * a.cols + c0, x);
#pragma unroll
      for (int v = 0; v < V; v++) {
        float d = x[v] - shift[v];
        s1[v] += d;
        s2[v] += d * d;
      }
    }
  }
  bn_block_pair_sums<V>(s1, s2, a.part_a, a.part_b, a.cols, c0);
}

// Backward: sums of g and g xhat, g = dy masked by the ReLU.
template <typename T, int V>
__global__ void bn_grad_sums_kernel(BnPartialArgs<T> a) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  float s1[V] = {}, s2[V] = {};
  if (c0 < a.cols) {
    float mean[V], invstd[V], x[V], y[V] = {}, dy[V];
#pragma unroll
    for (int v = 0; v < V; v++) {
      mean[v] = a.mean[c0 + v];
      invstd[v] = a.invstd[c0 + v];
    }
    int64_t r1 = min(a.rows, ((int64_t)blockIdx.y + 1) * a.rows_per_part);
    for (int64_t r = (int64_t)blockIdx.y * a.rows_per_part + threadIdx.y; r < r1; r += blockDim.y) {
      int64_t e = r * a.cols + c0;
      ops_pack_load<T, V>(a.x + e, x);
      ops_pack_load<T, V>(a.dy + e, dy);
      if (a.relu) ops_pack_load<T, V>(a.y + e, y);
#pragma unroll
      for (int v = 0; v < V; v++) {
        float g = a.relu && !(y[v] > 0) ? 0.0f : dy[v];
        s1[v] += g;
        s2[v] += g * (x[v] - mean[v]) * invstd[v];
      }
    }
  }
  bn_block_pair_sums<V>(s1, s2, a.part_a, a.part_b, a.cols, c0);
}

// The finalize kernels' block: kFinCols channels along x and kFinLanes
// lanes along y, lane l adding parts l, l + kFinLanes, ... of its channel,
// then the lanes' sums added in a fixed tree (bn_lane_sums), so that a
// channel's sum takes parts / kFinLanes dependent loads rather than parts
// and does not depend on timing. Launched with bn_finalize_grid.
constexpr int kFinCols = 32, kFinLanes = 8;

static dim3 bn_finalize_grid(int64_t cols) {
  return dim3((unsigned)((cols + kFinCols - 1) / kFinCols));
}

// Channel c's sums of part_a and part_b (parts, cols) over the parts, in
// the threads of row 0. Every thread of the block calls it.
__device__ __forceinline__ void bn_sum_parts(const float *part_a, const float *part_b,
                                             int64_t parts, int64_t cols, int64_t c, float *s1,
                                             float *s2) {
  float a[1] = {0}, b[1] = {0};
  if (c < cols)
    for (int64_t i = threadIdx.y; i < parts; i += kFinLanes) {
      a[0] += part_a[i * cols + c];
      b[0] += part_b[i * cols + c];
    }
  bn_lane_sums<1>(a, b);
  *s1 = a[0];
  *s2 = b[0];
}

// The training forward's statistics from the parts.
template <typename T>
__global__ void bn_stats_finalize_kernel(const T *x, const float *part_a, const float *part_b,
                                         int64_t parts, int64_t rows, int64_t cols, BatchNorm bn) {
  int64_t c = (int64_t)blockIdx.x * kFinCols + threadIdx.x;
  float s1, s2;
  bn_sum_parts(part_a, part_b, parts, cols, c, &s1, &s2);
  if (threadIdx.y != 0 || c >= cols) return;
  float m = (float)rows, d_mean = s1 / m;
  float var = fmaxf(s2 / m - d_mean * d_mean, 0.0f);
  float mean = ops_f32(x[c]) + d_mean;
  ((float *)bn.save_mean.data)[c] = mean;
  ((float *)bn.save_invstd.data)[c] = rsqrtf(var + bn.eps);
  float *rm = (float *)bn.running_mean.data, *rv = (float *)bn.running_var.data;
  rm[c] = (1 - bn.momentum) * rm[c] + bn.momentum * mean;
  rv[c] = (1 - bn.momentum) * rv[c] + bn.momentum * var * m / (m - 1);
}

// The backward's per-channel results: dbeta, dgamma (maybe accumulated) and
// the two means dx needs, written to coef (2, cols).
__global__ void bn_grad_finalize_kernel(const float *part_a, const float *part_b, int64_t parts,
                                        int64_t rows, int64_t cols, float *dgamma, float *dbeta,
                                        bool accumulate, float *coef) {
  int64_t c = (int64_t)blockIdx.x * kFinCols + threadIdx.x;
  float s1, s2;
  bn_sum_parts(part_a, part_b, parts, cols, c, &s1, &s2);
  if (threadIdx.y != 0 || c >= cols) return;
  dbeta[c] = s1 + (accumulate ? dbeta[c] : 0.0f);
  dgamma[c] = s2 + (accumulate ? dgamma[c] : 0.0f);
  coef[c] = s1 / (float)rows;
  coef[cols + c] = s2 / (float)rows;
}

// The elementwise kernels compute their channels' constants once and then
// stride over rows.

// y = act(scale x + shift (+ z)), scale = gamma invstd, shift = beta - mean
// scale (the CPU's formula); for inference `spread` is the running variance,
// else the saved invstd.
template <typename T, int V>
__global__ void bn_apply_kernel(const T *x, const T *z, T *y, int64_t rows, int64_t cols,
                                const float *gamma, const float *beta, const float *mean,
                                const float *spread, bool spread_is_var, float eps, bool relu) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= cols) return;
  float scale[V], shift[V], v_x[V], v_z[V], out[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    int64_t c = c0 + v;
    float invstd = spread_is_var ? rsqrtf(spread[c] + eps) : spread[c];
    scale[v] = gamma[c] * invstd;
    shift[v] = beta[c] - mean[c] * scale[v];
  }
  int64_t step = (int64_t)gridDim.y * blockDim.y;
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += step) {
    int64_t e = r * cols + c0;
    ops_pack_load<T, V>(x + e, v_x);
    if (z) ops_pack_load<T, V>(z + e, v_z);
#pragma unroll
    for (int v = 0; v < V; v++) {
      float o = scale[v] * v_x[v] + shift[v];
      if (z) o += v_z[v];
      out[v] = relu && !(o > 0) ? 0.0f : o;
    }
    ops_pack_store<T, V>(y + e, out);
  }
}

// dx = gamma invstd (g - mean(g) - xhat mean(g xhat)), dz = g; coef holds the
// two means (2, cols).
template <typename T, int V>
__global__ void bn_dx_kernel(const T *x, const T *y, const T *dy, T *dx, T *dz, int64_t rows,
                             int64_t cols, const float *gamma, const float *mean,
                             const float *invstd, const float *coef, bool relu) {
  int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
  if (c0 >= cols) return;
  float mu[V], is[V], k[V], mg[V], mgx[V], v_x[V], v_y[V] = {}, v_dy[V], g[V], out[V];
#pragma unroll
  for (int v = 0; v < V; v++) {
    int64_t c = c0 + v;
    mu[v] = mean[c], is[v] = invstd[c], k[v] = gamma[c] * is[v];
    mg[v] = coef[c], mgx[v] = coef[cols + c];
  }
  int64_t step = (int64_t)gridDim.y * blockDim.y;
  for (int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y; r < rows; r += step) {
    int64_t e = r * cols + c0;
    ops_pack_load<T, V>(x + e, v_x);
    ops_pack_load<T, V>(dy + e, v_dy);
    if (relu) ops_pack_load<T, V>(y + e, v_y);
#pragma unroll
    for (int v = 0; v < V; v++) {
      g[v] = relu && !(v_y[v] > 0) ? 0.0f : v_dy[v];
      out[v] = k[v] * (g[v] - mg[v] - (v_x[v] - mu[v]) * is[v] * mgx[v]);
    }
    // dx may be dy (in place): every read of this row is done.
    if (dz) ops_pack_store<T, V>(dz + e, g);
    ops_pack_store<T, V>(dx + e, out);
  }
}

// Block (cw, 256 / cw) with cw the channel groups per block (a power of two
// up to 32); grid (channel blocks, row blocks).
static void bn_elementwise_grid(int64_t rows, int64_t groups, dim3 *grid, dim3 *block) {
  unsigned cw = 1;
  while (cw < 32 && cw < groups) cw *= 2;
  *block = dim3(cw, 256 / cw);
  int64_t row_blocks = (rows + block->y - 1) / block->y;
  *grid = dim3((unsigned)((groups + cw - 1) / cw),
               (unsigned)(row_blocks < 1 ? 1 : row_blocks < 65535 ? row_blocks : 65535));
}

// How the partial-sum kernels split (rows, groups of channels): block shape
// and number of row parts, within the workspace (2 parts floats per column
// plus 2 more).
typedef struct BnSplit {
  dim3 block, grid;
  int64_t parts, rows_per_part;
} BnSplit;

static BnSplit bn_split(const Device *dev, int64_t rows, int64_t cols, int64_t groups) {
  BnSplit s;
  unsigned cw = 1;
  while (cw < 32 && cw < groups) cw *= 2;
  int64_t col_blocks = (groups + cw - 1) / cw;
  int64_t parts = (rows + 255) / 256;
  int64_t want = (4 * (int64_t)dev->sm_count + col_blocks - 1) / col_blocks;
  int64_t fit = (int64_t)(dev->workspace_bytes / sizeof(float)) / cols / 2 - 1;
  parts = parts < want ? parts : want;
  parts = parts < fit ? parts : fit;
  parts = parts < 65535 ? parts : 65535;
  OP_REQUIRE("batch norm", parts >= 1);
  s.parts = parts;
  s.rows_per_part = (rows + parts - 1) / parts;
  s.block = dim3(cw, 256 / cw);
  s.grid = dim3((unsigned)col_blocks, (unsigned)parts);
  return s;
}

static void bn_require(const char *op, const Tensor *x, const Tensor *other) {
  OP_REQUIRE(op, !other || (other->dtype == x->dtype && tensor_numel(other) == tensor_numel(x)));
}

template <typename T, int V>
static void bn_fwd_train_launch(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                const Tensor *z, bool relu, const Tensor *y, int64_t m,
                                int64_t c) {
  BnSplit s = bn_split(dev, m, c, c / V);
  float *part_a = (float *)dev->workspace, *part_b = part_a + s.parts * c;
  BnPartialArgs<T> a = {(const T *)x->data, NULL, NULL, NULL, NULL, m, c,
                        s.rows_per_part, part_a, part_b, relu};
  bn_stats_kernel<T, V><<<s.grid, s.block, 0, dev->stream>>>(a);
  CHECK_LAUNCH();
  bn_stats_finalize_kernel<T><<<bn_finalize_grid(c), dim3(kFinCols, kFinLanes), 0, dev->stream>>>(
      (const T *)x->data, part_a, part_b, s.parts, m, c, *bn);
  CHECK_LAUNCH();
  dim3 grid, block;
  bn_elementwise_grid(m, c / V, &grid, &block);
  bn_apply_kernel<T, V><<<grid, block, 0, dev->stream>>>(
      (const T *)x->data, z ? (const T *)z->data : NULL, (T *)y->data, m, c,
      (const float *)bn->gamma.data, (const float *)bn->beta.data,
      (const float *)bn->save_mean.data, (const float *)bn->save_invstd.data, false, bn->eps,
      relu);
  CHECK_LAUNCH();
}

void op_batchnorm_fwd_train_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                 const Tensor *z, bool relu, const Tensor *y) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_train", bn, x, &m, &c);
  bn_require("op_batchnorm_fwd_train", x, z);
  bn_require("op_batchnorm_fwd_train", x, y);
  OP_REQUIRE("op_batchnorm_fwd_train", m >= 2);
  OPS_FLOAT_DISPATCH("op_batchnorm_fwd_train", x->dtype, {
    typedef scalar_t T;
    if (ops_channel_width<T>(c, {x->data, z ? z->data : NULL, y->data}) > 1)
      bn_fwd_train_launch<T, 16 / sizeof(T)>(dev, bn, x, z, relu, y, m, c);
    else
      bn_fwd_train_launch<T, 1>(dev, bn, x, z, relu, y, m, c);
  });
}

void op_batchnorm_fwd_infer_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                                 const Tensor *z, bool relu, const Tensor *y) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_fwd_infer", bn, x, &m, &c);
  bn_require("op_batchnorm_fwd_infer", x, z);
  bn_require("op_batchnorm_fwd_infer", x, y);
  if (m * c == 0) return;
  OPS_FLOAT_DISPATCH("op_batchnorm_fwd_infer", x->dtype, {
    typedef scalar_t T;
    int v = ops_channel_width<T>(c, {x->data, z ? z->data : NULL, y->data});
    dim3 grid, block;
    bn_elementwise_grid(m, c / v, &grid, &block);
    const T *pz = z ? (const T *)z->data : NULL;
    const float *g = (const float *)bn->gamma.data, *b = (const float *)bn->beta.data;
    const float *rm = (const float *)bn->running_mean.data;
    const float *rv = (const float *)bn->running_var.data;
    if (v > 1)
      bn_apply_kernel<T, 16 / sizeof(T)><<<grid, block, 0, dev->stream>>>(
          (const T *)x->data, pz, (T *)y->data, m, c, g, b, rm, rv, true, bn->eps, relu);
    else
      bn_apply_kernel<T, 1><<<grid, block, 0, dev->stream>>>(
          (const T *)x->data, pz, (T *)y->data, m, c, g, b, rm, rv, true, bn->eps, relu);
  });
  CHECK_LAUNCH();
}

template <typename T, int V>
static void bn_bwd_launch(const Device *dev, const BatchNorm *bn, const Tensor *x,
                          const Tensor *y, const Tensor *dy, bool relu, const Tensor *dx,
                          const Tensor *dz, const Tensor *dgamma, const Tensor *dbeta,
                          bool accumulate, int64_t m, int64_t c) {
  BnSplit s = bn_split(dev, m, c, c / V);
  float *part_a = (float *)dev->workspace, *part_b = part_a + s.parts * c;
  float *coef = part_b + s.parts * c;  // (2, C)
  const float *mean = (const float *)bn->save_mean.data;
  const float *invstd = (const float *)bn->save_invstd.data;
  BnPartialArgs<T> a = {(const T *)x->data, (const T *)y->data, (const T *)dy->data, mean,
                        invstd, m, c, s.rows_per_part, part_a, part_b, relu};
  bn_grad_sums_kernel<T, V><<<s.grid, s.block, 0, dev->stream>>>(a);
  CHECK_LAUNCH();
  bn_grad_finalize_kernel<<<bn_finalize_grid(c), dim3(kFinCols, kFinLanes), 0, dev->stream>>>(
      part_a, part_b, s.parts, m, c, (float *)dgamma->data, (float *)dbeta->data, accumulate,
      coef);
  CHECK_LAUNCH();
  dim3 grid, block;
  bn_elementwise_grid(m, c / V, &grid, &block);
  bn_dx_kernel<T, V><<<grid, block, 0, dev->stream>>>(
      (const T *)x->data, (const T *)y->data, (const T *)dy->data, (T *)dx->data,
      dz ? (T *)dz->data : NULL, m, c, (const float *)bn->gamma.data, mean, invstd, coef, relu);
  CHECK_LAUNCH();
}

void op_batchnorm_bwd_cuda(const Device *dev, const BatchNorm *bn, const Tensor *x,
                           const Tensor *y, const Tensor *dy, bool relu, const Tensor *dx,
                           const Tensor *dz, const Tensor *dgamma, const Tensor *dbeta,
                           bool accumulate) {
  int64_t m, c;
  batchnorm_geometry("op_batchnorm_bwd", bn, x, &m, &c);
  bn_require("op_batchnorm_bwd", x, y);
  bn_require("op_batchnorm_bwd", x, dy);
  bn_require("op_batchnorm_bwd", x, dx);
  bn_require("op_batchnorm_bwd", x, dz);
  OP_REQUIRE("op_batchnorm_bwd", dgamma->dtype == DT_F32 && tensor_numel(dgamma) == c);
  OP_REQUIRE("op_batchnorm_bwd", dbeta->dtype == DT_F32 && tensor_numel(dbeta) == c);
  if (m == 0) {  // no rows: sums of nothing, 0 as on the CPU
    if (!accumulate) {
      CHECK_CUDA(cudaMemsetAsync(dgamma->data, 0, tensor_bytes(dgamma), dev->stream));
      CHECK_CUDA(cudaMemsetAsync(dbeta->data, 0, tensor_bytes(dbeta), dev->stream));
    }
    return;
  }
  OPS_FLOAT_DISPATCH("op_batchnorm_bwd", x->dtype, {
    typedef scalar_t T;
    if (ops_channel_width<T>(c, {x->data, y->data, dy->data, dx->data, dz ? dz->data : NULL}) > 1)
      bn_bwd_launch<T, 16 / sizeof(T)>(dev, bn, x, y, dy, relu, dx, dz, dgamma, dbeta,
                                       accumulate, m, c);
    else
      bn_bwd_launch<T, 1>(dev, bn, x, y, dy, relu, dx, dz, dgamma, dbeta, accumulate, m, c);
  });
}
