// attention_fused_cuda.cu: fused attention on the GPU (attention.h,
// op_attention_fused_fwd/bwd), flash-attention style on tensor cores.
//
// Every kernel works on 64-row tiles of one head with 4 warps, each warp
// owning 16 rows of the tile; the products are mma_16816 (cuda_mma.cuh), the
// operand B read from shared memory, the operand A from registers (a warp's
// own rows, loaded once from global memory, or the accumulators of the
// product before). A score tile is S = Q K^T scaled by log2(e) / sqrt(Dh),
// so the softmax is exp2 of S minus the row's maximum (forward) or its
// log-sum-exp (backward), in fp32; the probabilities are rounded to the
// dtype only as the A operand of the next product, as the unfused path
// rounds them when it stores them.
//
//   fwd:      a block per 64 queries; K and V tiles of 64 keys in shared
//             memory (V transposed); per key tile S, the running maximum and
//             sum (online softmax), O += dropout(P) V; at the end O / sum and
//             lse.
//   delta:    delta_i = dO_i . O_i, a thread per query row.
//   bwd_kv:   a block per 64 keys; Q and dO tiles of 64 queries in shared
//             memory, each both ways round; per query tile S^T and dP^T =
//             V dO^T, P^T from lse, dS^T = P^T (dP^T - delta), then
//             dV += dropout(P)^T dO and dK += dS^T Q.
//   bwd_q:    a block per 64 queries; K (both ways) and V tiles; per key tile
//             S, dP = dO V^T, dS, then dQ += dS K.
// Masked scores (keys at or past the sequence's length, keys after the query
// when causal, rows and columns past the tensor's end) are -inf, so their
// probabilities are 0; a tile wholly past the keys a block can see is not
// visited. The dropout mask is drawn per element from the counter-based
// stream at the element's index in the (B, H, Tq, Tk) probabilities, as
// op_dropout draws it for the unfused path.
#include "core/rng.h"
#include "ops/attention.h"
#include "ops/cuda.cuh"
#include "ops/cuda_mma.cuh"

#define FA_TILE 64            // rows of a block's tile, and of each tile it walks
#define FA_THREADS 128        // 4 warps of 16 rows
#define FA_PAD 8              // 16-bit elements after each shared row (bank spread)
#define FA_LOG2E 1.4426950408889634f

// A 64 x Dh tile of shared memory, row-major, and a Dh x 64 one (a tile
// transposed), in 16-bit elements; uint32_t so that pairs load as one word.
template <int kDh>
struct FaRows {
  static constexpr int kLd = kDh + FA_PAD;
  static constexpr int kWords = FA_TILE * kLd / 2;
};
template <int kDh>
struct FaCols {
  static constexpr int kLd = FA_TILE + FA_PAD;
  static constexpr int kWords = kDh * kLd / 2;
};

// What every kernel reads: the shapes, the masks and dropout.
typedef struct FaArgs {
  int64_t h, tq, tk;
  const int32_t *key_len;  // (B) or NULL
  bool causal;
  float scale_log2;        // log2(e) / sqrt(Dh)
  float keep;              // dropout's keep probability (1: none)
  uint64_t seed, stream;
} FaArgs;

// Keys of batch entry b that any query sees.
static __device__ __forceinline__ int64_t fa_valid(const FaArgs &a, int64_t b) {
  int64_t n = a.key_len ? (int64_t)a.key_len[b] : a.tk;
  return n < a.tk ? n : a.tk;
}
static __device__ __forceinline__ bool fa_masked(const FaArgs &a, int64_t valid, int64_t qi,
                                                 int64_t kj) {
  return kj >= valid || qi >= a.tq || (a.causal && kj > qi);
}
// Dropout's factor for probability (row r of the (B H Tq) rows, key kj).
static __device__ __forceinline__ float fa_drop(const FaArgs &a, int64_t r, int64_t kj) {
  if (a.keep >= 1.0f) return 1.0f;
  return rng_bernoulli(a.seed, a.stream, (uint64_t)(r * a.tk + kj), a.keep) ? 1.0f / a.keep : 0.0f;
}

// Element (b, t, h, 0) of a (B, T, H, Dh) tensor.
template <typename T, int kDh>
static __device__ __forceinline__ const T *fa_row(const T *x, int64_t t_len, int64_t heads,
                                                  int64_t b, int64_t t, int64_t h) {
  return x + ((b * t_len + t) * heads + h) * kDh;
}

// Rows [row0, row0 + 64) of head h of entry b of a (B, T, H, Dh) tensor into
// shared memory: row-major into `rows` and/or transposed into `cols` (either
// may be NULL); zeros past T. Every thread of the block calls it.
template <typename T, int kDh>
static __device__ void fa_load_tile(const T *x, int64_t t_len, int64_t heads, int64_t b,
                                    int64_t h, int64_t row0, uint32_t *rows, uint32_t *cols) {
  constexpr int kPairs = kDh / 2;
  for (int i = threadIdx.x; i < FA_TILE * kPairs; i += FA_THREADS) {
    int r = i / kPairs, c = (i % kPairs) * 2;
    uint32_t pair = 0;
    if (row0 + r < t_len) pair = mma_load2(fa_row<T, kDh>(x, t_len, heads, b, row0 + r, h) + c);
    if (rows) rows[(r * FaRows<kDh>::kLd + c) / 2] = pair;
    if (cols) {
      uint16_t *col = reinterpret_cast<uint16_t *>(cols);
      col[c * FaCols<kDh>::kLd + r] = (uint16_t)(pair & 0xffffu);
      col[(c + 1) * FaCols<kDh>::kLd + r] = (uint16_t)(pair >> 16);
    }
  }
}

// The A registers of a warp's 16 rows (row0 + 16 warp + ...) of a tensor,
// from global memory: a[kk] for columns 16 kk ... 16 kk + 15; zeros past T.
template <typename T, int kDh>
static __device__ void fa_load_a(const T *x, int64_t t_len, int64_t heads, int64_t b, int64_t h,
                                 int64_t row0, uint32_t a[kDh / 16][4]) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  for (int half = 0; half < 2; half++) {
    int64_t t = row0 + warp * 16 + g + 8 * half;
    const T *p = t < t_len ? fa_row<T, kDh>(x, t_len, heads, b, t, h) : NULL;
    for (int kk = 0; kk < kDh / 16; kk++) {
      a[kk][half] = p ? mma_load2(p + kk * 16 + 2 * c) : 0u;
      a[kk][2 + half] = p ? mma_load2(p + kk * 16 + 8 + 2 * c) : 0u;
    }
  }
}

// acc[n] (16 x 8, columns 8n...) = A (the warp's 16 rows, kDh wide) times
// the transpose of the 64 rows of `rows` (so acc's columns are the tile's
// rows): S = Q K^T and its kin.
template <typename T, int kDh>
static __device__ __forceinline__ void fa_rows_product(const uint32_t a[kDh / 16][4],
                                                       const uint32_t *rows, float acc[8][4]) {
  int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  for (int n = 0; n < 8; n++)
    for (int e = 0; e < 4; e++) acc[n][e] = 0.0f;
  for (int kk = 0; kk < kDh / 16; kk++)
    for (int n = 0; n < 8; n++) {
      const uint32_t *row = rows + ((n * 8 + g) * FaRows<kDh>::kLd + kk * 16 + 2 * c) / 2;
      uint32_t b[2] = {row[0], row[4]};
      mma_16816<T>(acc[n], a[kk], b);
    }
}

// acc[n] (16 x 8, columns 8n of Dh) += P (16 x 64, as accumulators p[8][4])
// times the 64 x Dh tile whose transpose is `cols`: O += P V and its kin.
template <typename T, int kDh>
static __device__ __forceinline__ void fa_cols_product(const float p[8][4], const uint32_t *cols,
                                                       float acc[kDh / 8][4]) {
  int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  for (int kk = 0; kk < 4; kk++) {
    uint32_t a[4];
    mma_pack_a<T>(p[2 * kk], p[2 * kk + 1], a);
    for (int n = 0; n < kDh / 8; n++) {
      const uint32_t *col = cols + ((n * 8 + g) * FaCols<kDh>::kLd + kk * 16 + 2 * c) / 2;
      uint32_t b[2] = {col[0], col[4]};
      mma_16816<T>(acc[n], a, b);
    }
  }
}

// Writes a warp's accumulators (16 rows x Dh, times `scale`) to rows row0 +
// 16 warp + ... of head h of a (B, T, H, Dh) tensor (rows past T skipped).
template <typename T, int kDh>
static __device__ void fa_store(T *x, int64_t t_len, int64_t heads, int64_t b, int64_t h,
                                int64_t row0, const float acc[kDh / 8][4], const float scale[2]) {
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  for (int half = 0; half < 2; half++) {
    int64_t t = row0 + warp * 16 + g + 8 * half;
    if (t >= t_len) continue;
    T *p = const_cast<T *>(fa_row<T, kDh>(x, t_len, heads, b, t, h));
    for (int n = 0; n < kDh / 8; n++)
      *reinterpret_cast<uint32_t *>(p + n * 8 + 2 * c) =
          mma_pack<T>(acc[n][2 * half] * scale[half], acc[n][2 * half + 1] * scale[half]);
  }
}

// ---------------------------------------------------------------- forward
template <typename T, int kDh>
__global__ void __launch_bounds__(FA_THREADS)
    fa_fwd_kernel(const T *q, const T *k, const T *v, FaArgs a, float *lse, T *out) {
  __shared__ uint32_t ks[FaRows<kDh>::kWords], vt[FaCols<kDh>::kWords];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
  int64_t q0 = (int64_t)blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z;
  int64_t valid = fa_valid(a, b), end = valid;
  if (a.causal && q0 + FA_TILE < end) end = q0 + FA_TILE;  // keys after the tile's last query
  uint32_t qa[kDh / 16][4];
  fa_load_a<T, kDh>(q, a.tq, a.h, b, h, q0, qa);
  float o[kDh / 8][4] = {}, m[2] = {-INFINITY, -INFINITY}, sum[2] = {0.0f, 0.0f};
  int64_t qi[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  for (int64_t k0 = 0; k0 < end; k0 += FA_TILE) {
    __syncthreads();  // the last tile's reads are done
    fa_load_tile<T, kDh>(k, a.tk, a.h, b, h, k0, ks, NULL);
    fa_load_tile<T, kDh>(v, a.tk, a.h, b, h, k0, NULL, vt);
    __syncthreads();
    float s[8][4];
    fa_rows_product<T, kDh>(qa, ks, s);
    for (int half = 0; half < 2; half++) {
      float tile_max = -INFINITY;
      for (int n = 0; n < 8; n++)
        for (int e = 0; e < 2; e++) {
          float &x = s[n][2 * half + e];
          int64_t kj = k0 + n * 8 + 2 * c + e;
          x = fa_masked(a, valid, qi[half], kj) ? -INFINITY : x * a.scale_log2;
          tile_max = fmaxf(tile_max, x);
        }
      // The row's maximum over the quad of lanes that hold it.
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 2));
      float m_new = fmaxf(m[half], tile_max), ref = m_new == -INFINITY ? 0.0f : m_new;
      float alpha = exp2f(m[half] - ref);  // 0 while the row has seen no key
      sum[half] *= alpha;
      for (int n = 0; n < kDh / 8; n++)
        for (int e = 0; e < 2; e++) o[n][2 * half + e] *= alpha;
      int64_t r = (b * a.h + h) * a.tq + qi[half];
      for (int n = 0; n < 8; n++)
        for (int e = 0; e < 2; e++) {
          float &x = s[n][2 * half + e];
          float p = exp2f(x - ref);
          sum[half] += p;
          x = p == 0.0f ? 0.0f : p * fa_drop(a, r, k0 + n * 8 + 2 * c + e);
        }
      m[half] = m_new;
    }
    fa_cols_product<T, kDh>(s, vt, o);
  }
  float inv[2];
  for (int half = 0; half < 2; half++) {
    sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 1);
    sum[half] += __shfl_xor_sync(0xffffffffu, sum[half], 2);
    inv[half] = sum[half] > 0.0f ? 1.0f / sum[half] : 0.0f;
    if (c == 0 && qi[half] < a.tq)
      lse[(b * a.h + h) * a.tq + qi[half]] =
          sum[half] > 0.0f ? (m[half] + log2f(sum[half])) / FA_LOG2E : INFINITY;
  }
  fa_store<T, kDh>(out, a.tq, a.h, b, h, q0, o, inv);
}

// ---------------------------------------------------------------- backward
// delta_i = dO_i . O_i over (B H Tq) rows, a thread per row.
template <typename T, int kDh>
__global__ void fa_delta_kernel(const T *out, const T *dout, FaArgs a, int64_t rows,
                                float *delta) {
  for (int64_t r = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; r < rows;
       r += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = r % a.tq, h = r / a.tq % a.h, b = r / a.tq / a.h;
    const T *o = fa_row<T, kDh>(out, a.tq, a.h, b, i, h);
    const T *d = fa_row<T, kDh>(dout, a.tq, a.h, b, i, h);
    float acc = 0.0f;
    for (int c = 0; c < kDh; c++) acc += ops_f32(o[c]) * ops_f32(d[c]);
    delta[r] = acc;
  }
}

// The probabilities and dS of a warp's 16 x 64 tile, in place. s holds the
// products q . k and dp the products dO . v, as accumulators; the tile's rows
// are queries (bwd_q) or keys (bwd_kv), from row_base, and its columns the
// others, from col_base. lse_of and delta_of hold the two rows' values
// (bwd_q) or the 64 columns' (bwd_kv). Leaves s = W = dropout(P) and dp =
// dS = P (dropout_bwd(dP) - delta) scale, the gradient of q . k.
template <bool kRowsAreQueries>
static __device__ __forceinline__ void fa_probs_and_ds(const FaArgs &a, int64_t b, int64_t h,
                                                       int64_t valid, int64_t row_base,
                                                       int64_t col_base, const float *lse_of,
                                                       const float *delta_of, float s[8][4],
                                                       float dp[8][4], float scale) {
  int lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  for (int n = 0; n < 8; n++)
    for (int e = 0; e < 4; e++) {
      int64_t row = row_base + g + 8 * (e >> 1), col = col_base + n * 8 + 2 * c + (e & 1);
      int64_t qi = kRowsAreQueries ? row : col, kj = kRowsAreQueries ? col : row;
      int idx = kRowsAreQueries ? (e >> 1) : n * 8 + 2 * c + (e & 1);
      float p = 0.0f, f = 0.0f;
      if (!fa_masked(a, valid, qi, kj)) {
        p = exp2f(s[n][e] * a.scale_log2 - lse_of[idx] * FA_LOG2E);
        f = fa_drop(a, (b * a.h + h) * a.tq + qi, kj);
      }
      dp[n][e] = p * (dp[n][e] * f - delta_of[idx]) * scale;
      s[n][e] = p * f;
    }
}

// dK and dV for 64 keys of a head.
template <typename T, int kDh>
__global__ void __launch_bounds__(FA_THREADS)
    fa_bwd_kv_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                     const float *delta, FaArgs a, float scale, T *dk, T *dv) {
  __shared__ uint32_t qs[FaRows<kDh>::kWords], qt[FaCols<kDh>::kWords];
  __shared__ uint32_t dos[FaRows<kDh>::kWords], dot[FaCols<kDh>::kWords];
  __shared__ float lse_s[FA_TILE], delta_s[FA_TILE];
  int warp = threadIdx.x >> 5;
  int64_t k0 = (int64_t)blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z;
  int64_t valid = fa_valid(a, b);
  float dka[kDh / 8][4] = {}, dva[kDh / 8][4] = {};
  if (k0 < valid) {  // else no query sees these keys: zero gradients
    uint32_t ka[kDh / 16][4], va[kDh / 16][4];
    fa_load_a<T, kDh>(k, a.tk, a.h, b, h, k0, ka);
    fa_load_a<T, kDh>(v, a.tk, a.h, b, h, k0, va);
    // Causal: queries before k0 see none of these keys.
    for (int64_t q0 = a.causal ? k0 : 0; q0 < a.tq; q0 += FA_TILE) {
      __syncthreads();
      fa_load_tile<T, kDh>(q, a.tq, a.h, b, h, q0, qs, qt);
      fa_load_tile<T, kDh>(dout, a.tq, a.h, b, h, q0, dos, dot);
      for (int i = threadIdx.x; i < FA_TILE; i += FA_THREADS) {
        bool in = q0 + i < a.tq;
        lse_s[i] = in ? lse[(b * a.h + h) * a.tq + q0 + i] : INFINITY;
        delta_s[i] = in ? delta[(b * a.h + h) * a.tq + q0 + i] : 0.0f;
      }
      __syncthreads();
      float s[8][4], dp[8][4];
      fa_rows_product<T, kDh>(ka, qs, s);    // S^T = K Q^T
      fa_rows_product<T, kDh>(va, dos, dp);  // dP^T = V dO^T
      fa_probs_and_ds<false>(a, b, h, valid, k0 + warp * 16, q0, lse_s, delta_s, s, dp, scale);
      fa_cols_product<T, kDh>(s, dot, dva);  // dV += W^T dO
      fa_cols_product<T, kDh>(dp, qt, dka);  // dK += dS^T Q
    }
  }
  const float one[2] = {1.0f, 1.0f};
  fa_store<T, kDh>(dk, a.tk, a.h, b, h, k0, dka, one);
  fa_store<T, kDh>(dv, a.tk, a.h, b, h, k0, dva, one);
}

// dQ for 64 queries of a head.
template <typename T, int kDh>
__global__ void __launch_bounds__(FA_THREADS)
    fa_bwd_q_kernel(const T *q, const T *k, const T *v, const T *dout, const float *lse,
                    const float *delta, FaArgs a, float scale, T *dq) {
  __shared__ uint32_t ks[FaRows<kDh>::kWords], kt[FaCols<kDh>::kWords];
  __shared__ uint32_t vs[FaRows<kDh>::kWords];
  int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2;
  int64_t q0 = (int64_t)blockIdx.x * FA_TILE, h = blockIdx.y, b = blockIdx.z;
  int64_t valid = fa_valid(a, b), end = valid;
  if (a.causal && q0 + FA_TILE < end) end = q0 + FA_TILE;
  uint32_t qa[kDh / 16][4], doa[kDh / 16][4];
  fa_load_a<T, kDh>(q, a.tq, a.h, b, h, q0, qa);
  fa_load_a<T, kDh>(dout, a.tq, a.h, b, h, q0, doa);
  float row_lse[2], row_delta[2];
  for (int half = 0; half < 2; half++) {
    int64_t i = q0 + warp * 16 + g + 8 * half;
    row_lse[half] = i < a.tq ? lse[(b * a.h + h) * a.tq + i] : INFINITY;
    row_delta[half] = i < a.tq ? delta[(b * a.h + h) * a.tq + i] : 0.0f;
  }
  float dqa[kDh / 8][4] = {};
  for (int64_t k0 = 0; k0 < end; k0 += FA_TILE) {
    __syncthreads();
    fa_load_tile<T, kDh>(k, a.tk, a.h, b, h, k0, ks, kt);
    fa_load_tile<T, kDh>(v, a.tk, a.h, b, h, k0, vs, NULL);
    __syncthreads();
    float s[8][4], dp[8][4];
    fa_rows_product<T, kDh>(qa, ks, s);    // S = Q K^T
    fa_rows_product<T, kDh>(doa, vs, dp);  // dP = dO V^T
    fa_probs_and_ds<true>(a, b, h, valid, q0 + warp * 16, k0, row_lse, row_delta, s, dp, scale);
    fa_cols_product<T, kDh>(dp, kt, dqa);  // dQ += dS K
  }
  const float one[2] = {1.0f, 1.0f};
  fa_store<T, kDh>(dq, a.tq, a.h, b, h, q0, dqa, one);
}

// ---------------------------------------------------------------- launches
static FaArgs fa_args(const AttnShape *s, const Tensor *key_len, bool causal,
                      const AttnDropout *drop) {
  FaArgs a = {s->h, s->tq, s->tk, key_len ? (const int32_t *)key_len->data : NULL, causal,
              FA_LOG2E / sqrtf((float)s->dh), 1.0f, 0, 0};
  if (drop && drop->keep_prob < 1.0f) {
    OP_REQUIRE("op_attention_fused", drop->keep_prob > 0.0f);
    a.keep = drop->keep_prob, a.seed = drop->seed, a.stream = drop->stream;
  }
  return a;
}

// Runs the statement with scalar_t (fp16 or bf16) and kDh bound.
#define FA_DISPATCH(name, dtype, dh, ...)                                                  \
  do {                                                                                    \
    OP_REQUIRE(name, (dtype) == DT_F16 || (dtype) == DT_BF16);                            \
    OP_REQUIRE(name, (dh) == 16 || (dh) == 32 || (dh) == 64);                             \
    if ((dtype) == DT_F16) {                                                              \
      typedef __half scalar_t;                                                            \
      FA_DISPATCH_DH(dh, __VA_ARGS__);                                                    \
    } else {                                                                              \
      typedef __nv_bfloat16 scalar_t;                                                     \
      FA_DISPATCH_DH(dh, __VA_ARGS__);                                                    \
    }                                                                                     \
  } while (0)
#define FA_DISPATCH_DH(dh, ...)                                          \
  do {                                                                  \
    if ((dh) == 16) {                                                   \
      constexpr int kDh = 16;                                           \
      __VA_ARGS__;                                                      \
    } else if ((dh) == 32) {                                            \
      constexpr int kDh = 32;                                           \
      __VA_ARGS__;                                                      \
    } else {                                                            \
      constexpr int kDh = 64;                                           \
      __VA_ARGS__;                                                      \
    }                                                                   \
  } while (0)

static dim3 fa_grid(int64_t rows, const AttnShape *s) {
  return dim3((unsigned)((rows + FA_TILE - 1) / FA_TILE), (unsigned)s->h, (unsigned)s->b);
}

extern "C" void op_attention_fused_fwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                            const Tensor *v, const Tensor *key_len, bool causal,
                                            const AttnDropout *drop, const Tensor *lse,
                                            const Tensor *out) {
  const char *name = "op_attention_fused_fwd";
  AttnShape s = op_attention_fused_shape(name, q, k, v, lse, NULL, out);
  op_attention_mask_check(&s, key_len, causal);
  if (s.b == 0 || s.tq == 0) return;
  FaArgs a = fa_args(&s, key_len, causal, drop);
  cudaStream_t st = dev->stream;
  FA_DISPATCH(name, q->dtype, s.dh,
              fa_fwd_kernel<scalar_t, kDh><<<fa_grid(s.tq, &s), FA_THREADS, 0, st>>>(
                  (const scalar_t *)q->data, (const scalar_t *)k->data,
                  (const scalar_t *)v->data, a, (float *)lse->data, (scalar_t *)out->data));
  CHECK_LAUNCH();
}

extern "C" void op_attention_fused_bwd_cuda(const Device *dev, const Tensor *q, const Tensor *k,
                                            const Tensor *v, const Tensor *key_len, bool causal,
                                            const AttnDropout *drop, const Tensor *out,
                                            const Tensor *lse, const Tensor *dout,
                                            const Tensor *delta, const Tensor *dq,
                                            const Tensor *dk, const Tensor *dv) {
  const char *name = "op_attention_fused_bwd";
  AttnShape s = op_attention_fused_shape(name, q, k, v, lse, delta, out);
  op_attention_mask_check(&s, key_len, causal);
  OP_REQUIRE(name, tensor_same_shape(dout, q) && dout->dtype == q->dtype);
  OP_REQUIRE(name, tensor_same_shape(dq, q) && tensor_same_shape(dk, k) &&
                       tensor_same_shape(dv, v) && dq->dtype == q->dtype &&
                       dk->dtype == q->dtype && dv->dtype == q->dtype);
  if (s.b == 0) return;
  FaArgs a = fa_args(&s, key_len, causal, drop);
  cudaStream_t st = dev->stream;
  float scale = 1.0f / sqrtf((float)s.dh);
  int64_t rows = s.b * s.h * s.tq;
  FA_DISPATCH(
      name, q->dtype, s.dh, {
        const scalar_t *qp = (const scalar_t *)q->data, *kp = (const scalar_t *)k->data;
        const scalar_t *vp = (const scalar_t *)v->data, *dop = (const scalar_t *)dout->data;
        const float *lp = (const float *)lse->data, *dl = (const float *)delta->data;
        if (rows > 0)
          fa_delta_kernel<scalar_t, kDh><<<ops_blocks(rows, OPS_THREADS), OPS_THREADS, 0, st>>>(
              (const scalar_t *)out->data, dop, a, rows, (float *)delta->data);
        if (s.tk > 0)  // with no query, zeros
          fa_bwd_kv_kernel<scalar_t, kDh><<<fa_grid(s.tk, &s), FA_THREADS, 0, st>>>(
            qp, kp, vp, dop, lp, dl, a, scale, (scalar_t *)dk->data, (scalar_t *)dv->data);
        if (s.tq > 0)
          fa_bwd_q_kernel<scalar_t, kDh><<<fa_grid(s.tq, &s), FA_THREADS, 0, st>>>(
              qp, kp, vp, dop, lp, dl, a, scale, (scalar_t *)dq->data);
      });
  CHECK_LAUNCH();
}
