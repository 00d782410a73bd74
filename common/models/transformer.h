// transformer.h: transformer layers over the op library. By default the
// pre-norm layers of the translation model (Vaswani et al. 2017, as the MLPerf
// reference builds them): self-attention, optional cross-attention over an
// encoder's output, and a ReLU feed-forward block, each sub-layer
// x + dropout(f(layer_norm(x))), with dropout on the attention probabilities
// too; no bias on the Q/K/V and output projections, biases on the
// feed-forward layers. TfmDims' switches give the encoder layers of the
// language model: post-norm sub-layers, GELU, and biases on every
// projection. Forward,
// backward, and the one-token decoder step of incremental decoding with a
// key/value cache (pre-norm decoder layers).
//
// Rows: a layer works on (B, T, D) activations, B sequences of T positions,
// seen as (B T, D) rows by the dense ops and as (B, T, H, D / H) by
// attention. Every buffer is carved once, at init, for at most max_rows rows
// and max_len positions; a batch uses the leading part of each.
//
// Precision: activations in `dtype` (fp32; fp16 or bf16 on CUDA); layer-norm
// parameters and statistics fp32; the weights the layers read come from a
// caller-given table (fp32 parameters or their low-precision copy, amp.h);
// parameter gradients are written into the fp32 gradient buffer.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "device/device.h"
#include "device/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

// The parameters of one layer, in this order in the ParamSet (the cross
// block only in decoder layers).
typedef enum {
  TFM_LN1_G, TFM_LN1_B, TFM_WQ, TFM_WK, TFM_WV, TFM_WO,              // self-attention
  TFM_LNC_G, TFM_LNC_B, TFM_WQC, TFM_WKC, TFM_WVC, TFM_WOC,          // cross-attention
  TFM_LN2_G, TFM_LN2_B, TFM_W1, TFM_B1, TFM_W2, TFM_B2,              // feed-forward
  TFM_BQ, TFM_BK, TFM_BV, TFM_BO,  // self-attention projection biases (proj_bias)
  TFM_ROLES
} TfmRole;

typedef struct TfmDims {
  int64_t d_model, d_ff, heads;
  float keep_prob;       // 1 - dropout, on the sub-layer outputs and after the activation
  float attn_keep_prob;  // 1 - dropout on the attention probabilities
  float ln_eps;          // the layer norms' epsilon
  // The variant: post_norm: each sub-layer  LN(x + dropout(f(x)))  (encoder
  // layers only) instead of  x + dropout(f(LN(x)));  gelu:
  // GELU (the erf form) instead of ReLU in the feed-forward block; proj_bias:
  // biases on the self-attention Q/K/V and output projections.
  bool post_norm, gelu, proj_bias;
  DType dtype;  // activations
  // Attention through op_attention_fused_fwd/bwd (tfm_fused_attention):
  // each layer keeps the rows' log-sum-exp (lse) instead of the
  // probabilities, and the backward recomputes them.
  bool fused_attention;
} TfmDims;

// The trainers' switch for TfmDims.fused_attention, and the rule it follows:
// fused where asked for and op_attention_fused_supported says it runs, on
// CUDA only (the CPU's fused op is a reference of plain loops; the unfused
// one runs on OpenBLAS).
#define TFM_FUSED_ATTENTION_KEY                                                              \
  {"fused_attention", CFG_BOOL, "true",                                                     \
   "CUDA, fp16/bf16, head size 16, 32 or 64: attention in fused kernels that never store "  \
   "the probabilities; false, or elsewhere: GEMMs around a softmax kernel", NULL}
bool tfm_fused_attention(bool wanted, DeviceKind device, DType dtype, int64_t d_model,
                         int64_t heads);

// Names and shapes of a layer's parameters: appended to specs (with their
// names written into names[], 32 bytes each) from *count on; index[role] is
// each role's position (-1: absent).
#define TFM_NAME_BYTES 32
void tfm_layer_specs(ParamSpec *specs, char (*names)[TFM_NAME_BYTES], int *count,
                     const char *prefix, const TfmDims *d, bool cross, int index[TFM_ROLES]);
// The reference's initialisation of a layer's parameters in a host copy of
// the ParamSet's params: Glorot-uniform weights, zero biases, layer norms 1
// and 0, drawn from (seed, stream first_stream + role).
void tfm_layer_init(float *host_params, const ParamSet *ps, const int index[TFM_ROLES],
                    uint64_t seed, uint64_t first_stream);

// One sub-layer's saved activations.
typedef struct TfmAttnActs {
  Tensor h, mean, rstd;  // (R, D): the layer norm's output (pre-norm) or input (post-
                         // norm: x + dropout(f(x))); its statistics (R), (R) fp32
  Tensor q, k, v, att;   // (R, D); k, v (Rk, D): Rk the key rows
  Tensor probs;          // (B, H, T, Tk); unfused only
  Tensor lse;            // (B, H, T) fp32; fused only
  Tensor out;            // (R, D) the sub-layer's output x + dropout(att Wo)
} TfmAttnActs;
typedef struct TfmFfnActs {
  Tensor h, mean, rstd;  // (R, D); (R), (R)
  Tensor f, fd;          // (R, F) ReLU output (GELU: its input), and the activation
                         // after dropout
  Tensor out;            // (R, D)
} TfmFfnActs;
typedef struct TfmLayer {
  bool cross;
  int p[TFM_ROLES];
  TfmAttnActs self, xattn;  // xattn: decoder layers only
  TfmFfnActs ffn;           // ffn.out is the layer's output
} TfmLayer;

// Scratch every layer of a stack shares: forward temporaries and the
// backward's gradients.
typedef struct TfmScratch {
  Tensor tmp, dh, dq, dk, dv, datt, dtmp;  // (R, D) rows (dk, dv: max key rows)
  Tensor df;                               // (R, F)
  Tensor attn;                             // (B, H, T, Tk): the dropped attention
                                           // probabilities (forward), the backward's scratch;
                                           // unfused only
  Tensor delta;                            // (B, H, T) fp32, the fused backward's scratch
} TfmScratch;

// Where a layer's weights and gradients are: the parameter tables the ops
// read (fp32 or a low-precision copy, as ParamSet order) and the fp32 grads.
typedef struct TfmWeights {
  const ParamSet *ps;
  void *lowp;        // the low-precision copy of ps->params, or NULL (fp32)
  DType dtype;
} TfmWeights;

// What a forward or backward pass needs besides the layer: the batch's
// shape, the source lengths (the key mask of encoder self-attention and of
// cross-attention: (B) int32 on the device), and dropout's seed and stream
// (keep_prob 1 in eval).
typedef struct TfmPass {
  const Device *dev;
  const TfmDims *d;
  const TfmWeights *w;
  int64_t b, t, tk;      // batch, positions, key positions of cross-attention
  const Tensor *key_len; // (B) int32: valid source positions
  float keep_prob, attn_keep_prob;
  uint64_t seed, stream; // stream: the layer's first dropout stream (TFM_DROP_STREAMS)
} TfmPass;
// Dropout streams a layer uses, from TfmPass.stream on: the self- and
// cross-attention outputs, the ReLU, the feed-forward output, and the self-
// and cross-attention probabilities.
#define TFM_DROP_STREAMS 6

// Carves a layer's activations (max_rows rows, keys up to max_key_rows,
// attention of at most max_probs elements per sub-layer) from arena.
void tfm_layer_alloc(TfmLayer *l, Arena *arena, const TfmDims *d, int64_t max_rows,
                     int64_t max_key_rows, int64_t max_probs);
// The shared scratch: the forward's temporaries for max_rows rows, the
// backward's gradients (dh, dq, dk, dv, datt, dtmp, df) for grad_rows (a
// model whose eval batches are larger than its training batches carves
// fewer).
void tfm_scratch_alloc(TfmScratch *s, Arena *arena, const TfmDims *d, int64_t max_rows,
                       int64_t grad_rows, int64_t max_probs);

// Forward: x (B, T, D) -> l->ffn.out. Encoder layers: self-attention masked
// by key_len; decoder layers: causal self-attention, then cross-attention
// over mem (B, Tk, D), the encoder's final output, masked by key_len.
void tfm_layer_fwd(TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x,
                   const Tensor *mem);
// Backward: dx (B, T, D) is the gradient of l->ffn.out on entry and of x on
// return (updated in place); dmem (decoder layers) is added into. Parameter
// gradients are added into w->ps->grads (the caller zeroes them per step).
void tfm_layer_bwd(const TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x,
                   const Tensor *mem, const Tensor *dx, const Tensor *dmem);

// Incremental decoding (decoder layers, eval): one new position per
// sequence. x: (B, D) the new position's input; the self-attention cache
// holds keys and values of the positions before it, (B, t, D) in cache_k[0]
// / cache_v[0], and this step writes (B, t + 1, D) into cache_k[1] /
// cache_v[1] (the caller swaps the pair); mem_k, mem_v: (B, Tk, D) the
// cross-attention keys and values of the encoder output (tfm_layer_memory).
// Output in l->ffn.out (B, D).
typedef struct TfmCache {
  Tensor k[2], v[2];  // (B, max_len, D) each, ping-pong
  Tensor mem_k, mem_v;
} TfmCache;
void tfm_cache_alloc(TfmCache *c, Arena *arena, const TfmDims *d, int64_t max_seqs,
                     int64_t max_len, int64_t max_src);
// The cross-attention keys and values of mem (B, Tk, D) into c.
void tfm_layer_memory(const TfmLayer *l, const TfmPass *p, const Tensor *mem, TfmCache *c);
void tfm_layer_step(TfmLayer *l, const TfmPass *p, const TfmScratch *s, TfmCache *c,
                    int64_t t, const Tensor *x);

// A (rows, cols) view of the first rows * cols elements of buffer t.
Tensor tfm_view2(const Tensor *t, int64_t rows, int64_t cols);
// The weight of role in l as the ops read it.
Tensor tfm_weight(const TfmWeights *w, const TfmLayer *l, TfmRole role);

#ifdef __cplusplus
}
#endif
