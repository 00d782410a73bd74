// nmt_model.h: the translation Transformer (MLPerf's Transformer-big and its
// smaller configs): an encoder and a decoder stack of pre-norm layers
// (models/transformer.h), each stack ending in a layer norm; one embedding
// matrix shared by the encoder input, the decoder input and the output
// projection, its lookups scaled by sqrt(d_model); sinusoidal positions
// (the reference's: sines in the first half of the channels, cosines in
// the second); dropout on the embedded inputs and inside the layers;
// softmax cross-entropy with label smoothing over the non-pad targets.
//
// Precision as models/transformer.h: fp32, or fp16/bf16 activations on CUDA
// from a low-precision copy of every weight matrix (the embedding included,
// for the output projection), cast at each forward; the embedding lookup
// reads the fp32 table; the loss and every gradient are fp32.
#pragma once
#include <stdint.h>

#include "device/device.h"
#include "device/tensor.h"
#include "models/transformer.h"
#include "wmt_data.h"

#ifdef __cplusplus
extern "C" {
#endif

#define NMT_MAX_LAYERS 16

typedef struct NmtShape {
  int64_t vocab, d_model, d_ff, heads;
  int enc_layers, dec_layers;
  float dropout;            // on the embedded inputs, sub-layer outputs, after the ReLU
  float attention_dropout;  // on the attention probabilities
  float label_smoothing;
  DType dtype;
  bool fused_attention;     // asked for (TFM_FUSED_ATTENTION_KEY; tfm_fused_attention decides)
  // Buffer sizes: token rows of a training batch (padded), positions of a
  // sequence, and sequences decoded at once (eval sentences times beam).
  int64_t max_rows, max_len, max_decode_seqs;
} NmtShape;

typedef struct NmtModel {
  NmtShape shape;
  TfmDims dims;       // training (dropout on)
  TfmDims eval_dims;  // dropout off
  ParamSpec specs[3 + 18 * 2 * NMT_MAX_LAYERS];
  char names[3 + 18 * 2 * NMT_MAX_LAYERS][TFM_NAME_BYTES];
  int emb, enc_ln, dec_ln;  // parameter indices: the embedding, the final norms' gamma
  ParamSet ps;
  void *lowp;               // low-precision copy of ps->params (fp16/bf16), or NULL
  TfmWeights w;
  TfmLayer enc[NMT_MAX_LAYERS], dec[NMT_MAX_LAYERS];
  TfmScratch scratch;
  TfmCache cache[NMT_MAX_LAYERS];
  Arena arena;
  // A batch on the device (max_rows, or max_decode_seqs while decoding).
  Tensor src, tgt_in, tgt_out;  // (R) int32 ids and labels
  Tensor src_pos, tgt_pos;      // (R) int32 positions 0..T-1 of each row
  Tensor src_len;               // (B) int32
  Tensor src_kept, tgt_kept;    // (R) int32: 1 for a token, 0 for a pad
  Tensor kept_table;            // (2, D) fp32: rows of 0s and 1s, looked up by *_kept
  Tensor kept_table_lowp;       // the same in the activation dtype (the gradients')
  Tensor kept_rows;             // (R, D) fp32 the lookup's mask
  Tensor positions;             // (max_len, D) the sinusoid table, activation dtype
  Tensor emb_f32, pos_rows;     // (R, D) fp32 lookup; (R, D) positions looked up
  Tensor x_src, x_tgt;          // (R, D) embedded inputs
  Tensor enc_out, dec_out;      // (R, D) final layer norms' outputs
  Tensor enc_mean, enc_rstd, dec_mean, dec_rstd;  // (R) fp32
  Tensor logits, dlogits;       // (R, V)
  Tensor loss;                  // (1) fp32
  Tensor d_enc, d_dec, d_x;     // (R, D) gradients
  Tensor beam_rows;             // (max_decode_seqs) int32: the gather's rows
  Tensor mem;                   // (max_decode_seqs * max_len, D) encoder output per beam
  int32_t *host_ids;            // (2 max_rows + max_decode_seqs) staging on the host
  int64_t dec_seqs, dec_src;    // the decoding batch: hypotheses, source positions
} NmtModel;

// Builds the parameter table (n_state optimizer buffers), initialises it
// from seed on the host (embedding N(0, d_model^-1/2), layers as
// tfm_layer_init) and carves every buffer.
void nmt_model_init(NmtModel *m, const NmtShape *shape, int n_state, uint64_t seed,
                    DeviceKind device);
void nmt_model_free(NmtModel *m);

// The training forward and backward of one batch: m->loss gets the mean
// label-smoothed cross-entropy over the batch's target tokens, m->ps.grads
// the gradients (overwritten) times loss_scale. Dropout draws from (seed,
// step); hook hears of every tensor once all gradients are final.
void nmt_model_train_step(NmtModel *m, const Device *dev, const WmtBatch *batch,
                          float loss_scale, uint64_t seed, int64_t step, GradHook hook);

// Evaluation forward: the mean cross-entropy of the batch (no dropout, no
// smoothing), in m->loss.
void nmt_model_eval_loss(NmtModel *m, const Device *dev, const WmtBatch *batch);

// Incremental decoding: nmt_model_encode runs the encoder over the batch's
// b sources and copies its output for each of beam hypotheses per source
// into the decoder's cross-attention caches; nmt_model_decode_step feeds
// one token per hypothesis (ids (b * beam) on the host) at position t and
// returns the logits (b * beam, V) on the device; nmt_model_reorder makes
// hypothesis i continue from hypothesis parent[i] (host ids) in every
// self-attention cache, after step t.
void nmt_model_encode(NmtModel *m, const Device *dev, const WmtBatch *batch, int beam);
Tensor nmt_model_decode_step(NmtModel *m, const Device *dev, const int32_t *ids, int64_t t);
void nmt_model_reorder(NmtModel *m, const Device *dev, const int32_t *parent, int64_t t);

#ifdef __cplusplus
}
#endif
