// bert_model.h: the BERT encoder with a span head, for extractive question
// answering (SQuAD): word + position + token-type embeddings summed, a layer
// norm and dropout, then post-norm encoder layers with GELU and biases on
// every projection (models/transformer.h), then a linear layer giving each
// position a start and an end logit. The loss is (CE(start) + CE(end)) / 2,
// each the mean over the batch of a softmax cross-entropy over the
// sequence's positions (padding included, as the reference recipes).
//
// Weights come from a pretrained checkpoint in Hugging Face's names
// (bert_model_load; the span head too when the checkpoint has one) or, for
// tests, from a seed: N(0, 0.02) matrices and embeddings, zero biases, layer
// norms 1 and 0 (BERT's initialisation).
//
// Precision as the translation model: fp32, or fp16/bf16 activations on CUDA
// from a low-precision copy of every weight matrix, cast at each forward;
// the embedding tables are looked up in fp32 and the sum cast once.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "device/tensor.h"
#include "models/transformer.h"

#ifdef __cplusplus
extern "C" {
#endif

#define BERT_MAX_LAYERS 24
// Embeddings (3 tables, a layer norm), the layers, the span head.
#define BERT_MAX_PARAMS (5 + TFM_ROLES * BERT_MAX_LAYERS + 2)

typedef struct BertShape {
  int64_t vocab, d_model, d_ff, heads, layers, max_positions, type_vocab;
  float dropout;            // hidden: the embeddings' output and every sub-layer's
  float attention_dropout;  // on the attention probabilities
  float ln_eps;
  int32_t pad_id;           // the pad token, whose embedding is not trained
  DType dtype;
  bool fused_attention;     // asked for (TFM_FUSED_ATTENTION_KEY; tfm_fused_attention decides)
  // Buffer sizes: sequences of a batch, positions of a sequence.
  int64_t max_batch, max_len;
  // Sequences of a training batch, when fewer than max_batch (0: max_batch).
  // The eval keeps no activations for a backward pass: its layers run in
  // the first two layers' buffers by turns, so only those and the forward's
  // temporaries hold max_batch sequences; the other layers and the
  // gradients hold max_train_batch.
  int64_t max_train_batch;
} BertShape;

// A batch on the host: b sequences of t positions (padded), row-major.
typedef struct BertBatch {
  int64_t b, t;
  const int32_t *ids, *types;  // (b t)
  const int32_t *len;          // (b) valid positions (keys at or beyond are masked)
  const int32_t *start, *end;  // (b) answer span positions (training), or NULL
} BertBatch;

typedef struct BertModel {
  BertShape shape;
  TfmDims dims, eval_dims;
  ParamSpec specs[BERT_MAX_PARAMS];
  char names[BERT_MAX_PARAMS][TFM_NAME_BYTES];
  int word, pos, type, emb_ln, head;  // parameter indices (emb_ln: gamma, beta next; head: w, b)
  ParamSet ps;
  void *lowp;  // low-precision copy of ps->params (fp16/bf16), or NULL
  TfmWeights w;
  TfmLayer layers[BERT_MAX_LAYERS];
  TfmScratch scratch;
  Arena arena;
  // A batch on the device (R = b t rows).
  Tensor ids, types, pos_ids;  // (R) int32
  Tensor len, labels;          // (B) int32; (2B) int32: starts, then ends
  Tensor emb, emb_part;        // (R, D) fp32: the summed lookups; one lookup
  Tensor emb_in;               // (R, D) the sum in the activation dtype (the norm's input)
  Tensor x0;                   // (R, D) the first layer's input
  Tensor emb_mean, emb_rstd;   // (R) fp32
  Tensor logits;               // (R, 2)
  Tensor span_logits;          // (2, B, T): start logits, then end logits
  Tensor dspan, dlogits;       // their gradients
  Tensor dx;                   // (R, D)
  Tensor hidden;               // the last forward's final layer output (a layer's ffn.out)
  Tensor loss;                 // (1) fp32
  int32_t *host_ids;           // (max_batch max_len) staging
} BertModel;

// Builds the parameter table (n_state optimizer buffers), initialises it
// from seed and carves every buffer.
void bert_model_init(BertModel *m, const BertShape *shape, int n_state, uint64_t seed,
                     DeviceKind device);
void bert_model_free(BertModel *m);

// A source of named fp32 tensors in Hugging Face's names: read copies the
// tensor called name, which must have this shape, into out (dying with a
// message naming it when it is mis-shaped), and returns false when the
// source has no such tensor.
typedef struct BertSource {
  bool (*read)(void *ctx, const char *name, int ndim, const int64_t *shape, float *out);
  void *ctx;
} BertSource;
// Loads every encoder tensor from src (names with or without the "bert."
// prefix; layer norms as weight/bias or gamma/beta): a missing one is a
// one-line error naming it and `what` (the file). The span head
// (qa_outputs) is loaded when src has it and keeps its seeded values
// otherwise; returns whether it was loaded.
bool bert_model_load(BertModel *m, BertSource src, const char *what);
// The same from a safetensors file.
bool bert_model_load_safetensors(BertModel *m, const char *path);

// Training forward and backward of one batch: m->loss gets the loss,
// m->ps.grads the gradients (overwritten) times loss_scale; dropout draws
// from (seed, step); hook hears of every tensor once its gradient is final.
void bert_model_train_step(BertModel *m, const Device *dev, const BertBatch *batch,
                           float loss_scale, uint64_t seed, int64_t step, GradHook hook);
// Evaluation forward (no dropout): m->span_logits (2, B, T) on the device
// (start logits, then end logits), and the last layer's output in
// m->layers[layers - 1].ffn.out (B T, D).
void bert_model_eval(BertModel *m, const Device *dev, const BertBatch *batch);

#ifdef __cplusplus
}
#endif
