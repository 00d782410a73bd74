// reduce_cuda.cu: the CUDA side of reduce.h - fixed-order column sums
// (also behind bias gradients: ops_colsum, cuda.cuh) and top-k.
#include "ops/cuda.cuh"
#include "ops/reduce.h"

// ---------------------------------------------------------------- reductions

// x (rows, cols) -> out (parts, cols): block (cw, 256 / cw) sums the rows
// [p * rows_per_part, ...) of columns [blockIdx.x * cw, ...) for p =
// blockIdx.y. Lanes along y add up in a fixed tree, so the result does not
// depend on timing.
template <typename T>
__global__ void reduce_colsum_kernel(const T *x, float *out, int64_t rows, int64_t cols,
                                   int64_t rows_per_part, float scale) {
  extern __shared__ float lane_sums[];  // (blockDim.y, blockDim.x)
  int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
  int64_t r0 = (int64_t)blockIdx.y * rows_per_part;
  int64_t r1 = min(rows, r0 + rows_per_part);
  float acc = 0;
  if (c < cols)
    for (int64_t r = r0 + threadIdx.y; r < r1; r += blockDim.y) acc += ops_f32(x[r * cols + c]);
  lane_sums[threadIdx.y * blockDim.x + threadIdx.x] = acc;
  __syncthreads();
  for (unsigned half = blockDim.y / 2; half > 0; half /= 2) {
    if (threadIdx.y < half)
      lane_sums[threadIdx.y * blockDim.x + threadIdx.x] +=
          lane_sums[(threadIdx.y + half) * blockDim.x + threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && c < cols) out[(int64_t)blockIdx.y * cols + c] = scale * lane_sums[threadIdx.x];
}

void ops_colsum(const Device *dev, const char *op, const void *x, DType dtype, int64_t rows,
                int64_t cols, float scale, float *out, bool accumulate) {
  if (cols == 0) return;
  unsigned cw = 1;
  while (cw < 32 && cw < cols) cw *= 2;
  dim3 block(cw, 256 / cw);
  int64_t col_blocks = (cols + cw - 1) / cw;
  // Enough row parts to fill the GPU, each of at least 256 rows, and no more
  // than the workspace holds.
  int64_t parts = (rows + 255) / 256;
  int64_t want = (4 * (int64_t)dev->sm_count + col_blocks - 1) / col_blocks;
  int64_t fit = (int64_t)(dev->workspace_bytes / sizeof(float)) / cols;
  parts = parts < want ? parts : want;
  parts = parts < fit ? parts : fit;
  parts = parts < 65535 ? parts : 65535;
  if (parts < 1) parts = 1;
  int64_t rows_per_part = (rows + parts - 1) / parts;
  // One part that overwrites goes straight to out; otherwise the parts are
  // added (to out's old values when accumulating) in a fixed order.
  bool direct = parts == 1 && !accumulate;
  float *dst = direct ? out : ops_workspace_floats(dev, parts * cols, op);
  size_t shmem = 256 * sizeof(float);
  OPS_FLOAT_DISPATCH(op, dtype, {
    typedef scalar_t T;
    reduce_colsum_kernel<T><<<dim3((unsigned)col_blocks, (unsigned)parts), block, shmem,
                            dev->stream>>>((const T *)x, dst, rows, cols, rows_per_part, scale);
  });
  CHECK_LAUNCH();
  if (!direct) ops_colsum_finalize(dev, dst, (int)parts, cols, out, accumulate);
}

static void reduce_cuda(const Device *dev, const char *op, const Tensor *x, int lead_axes,
                             const Tensor *y, bool mean) {
  int64_t rows, cols;
  reduce_geometry(op, x, lead_axes, y, &rows, &cols);
  float scale = mean ? 1.0f / (float)rows : 1.0f;  // an empty mean is NaN, as on the CPU
  ops_colsum(dev, op, x->data, x->dtype, rows, cols, scale, (float *)y->data, false);
}

extern "C" void op_sum_cuda(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  reduce_cuda(dev, "op_sum", x, lead_axes, y, false);
}

extern "C" void op_mean_cuda(const Device *dev, const Tensor *x, int lead_axes, const Tensor *y) {
  reduce_cuda(dev, "op_mean", x, lead_axes, y, true);
}

// ---------------------------------------------------------------- top-k

// One block per row, k rounds; round j takes the largest key below round
// j-1's pick (see reduce_topk_key), so nothing is stored between rounds.
template <typename T>
__global__ void reduce_topk_kernel(const T *x, T *values, int32_t *indices, int64_t cols, int k) {
  __shared__ unsigned long long warp_best[32];
  __shared__ unsigned long long pick;
  const T *row = x + (int64_t)blockIdx.x * cols;
  unsigned long long bound = 0;
  for (int j = 0; j < k; j++) {
    unsigned long long best = 0;  // below every real key: index term is >= 2^32 - cols
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      unsigned long long key = reduce_topk_key(__float_as_uint(ops_f32(row[c])), c);
      if ((j == 0 || key < bound) && key > best) best = key;
    }
    for (int off = 16; off > 0; off /= 2) {
      unsigned long long other = __shfl_down_sync(0xffffffffu, best, off);
      best = other > best ? other : best;
    }
    if (threadIdx.x % 32 == 0) warp_best[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (unsigned w = 1; w < blockDim.x / 32; w++)
        best = warp_best[w] > best ? warp_best[w] : best;
      pick = best;
      int64_t c = 0xffffffffu - (uint32_t)best;
      values[(int64_t)blockIdx.x * k + j] = row[c];
      indices[(int64_t)blockIdx.x * k + j] = (int32_t)c;
    }
    __syncthreads();
    bound = pick;
  }
}

extern "C" void op_topk_cuda(const Device *dev, const Tensor *x, int k, const Tensor *values,
                             const Tensor *indices) {
  int64_t rows, cols;
  reduce_topk_geometry(x, k, values, indices, &rows, &cols);
  if (rows == 0) return;
  OP_REQUIRE("op_topk", rows <= INT32_MAX);
  OPS_FLOAT_DISPATCH("op_topk", x->dtype, {
    typedef scalar_t T;
    reduce_topk_kernel<T><<<(unsigned)rows, 256, 0, dev->stream>>>(
        (const T *)x->data, (T *)values->data, (int32_t *)indices->data, cols, k);
  });
  CHECK_LAUNCH();
}

// ---------------------------------------------------------------- log-sum-exp

// One block per row: the row's maximum (with NaN noted), then the sum of
// exp(x - max) in double, each thread's share, then the warps', in a fixed
// order (the block's shape is fixed, so the bits are too).
template <typename T>
__global__ void reduce_logsumexp_kernel(const T *x, float *y, int64_t cols) {
  __shared__ float shared[32];
  __shared__ double sums[32];
  const T *row = x + (int64_t)blockIdx.x * cols;
  float mx = -INFINITY, nan = 0.0f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = ops_f32(row[c]);
    nan += isnan(v) ? 1.0f : 0.0f;
    mx = fmaxf(mx, v);
  }
  mx = ops_block_max(mx, shared);
  nan = ops_block_sum(nan, shared);
  if (nan > 0.0f || isinf(mx)) {  // NaN; every value -inf; a +inf
    if (threadIdx.x == 0) y[blockIdx.x] = nan > 0.0f ? NAN : mx;
    return;
  }
  double sum = 0;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) sum += exp((double)ops_f32(row[c]) - mx);
  for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (threadIdx.x % 32 == 0) sums[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0;
    for (unsigned w = 0; w < blockDim.x / 32; w++) total += sums[w];
    y[blockIdx.x] = (float)(mx + log(total));
  }
}

extern "C" void op_logsumexp_cuda(const Device *dev, const Tensor *x, const Tensor *y) {
  int64_t rows, cols;
  reduce_logsumexp_geometry(x, y, &rows, &cols);
  if (rows == 0) return;
  OP_REQUIRE("op_logsumexp", rows <= INT32_MAX);
  OPS_FLOAT_DISPATCH("op_logsumexp", x->dtype, {
    reduce_logsumexp_kernel<scalar_t><<<(unsigned)rows, 256, 0, dev->stream>>>(
        (const scalar_t *)x->data, (float *)y->data, cols);
  });
  CHECK_LAUNCH();
}
