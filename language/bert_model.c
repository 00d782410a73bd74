// bert_model.c: the BERT encoder and span head (bert_model.h).
#include "bert_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/activation.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "train/amp.h"
#include "train/safetensors.h"

#define BERT_INIT_STD 0.02f
#define BERT_INIT_STREAM 500  // parameter init streams: 500 + index
// Dropout streams of a step: the embeddings', then TFM_DROP_STREAMS per
// layer; a step's streams start at step << BERT_STREAM_BITS.
#define BERT_STREAM_BITS 10
enum { BERT_DROP_EMB, BERT_DROP_LAYERS };

static void bert_spec(BertModel *m, int *count, const char *name, int64_t rows, int64_t cols,
                      unsigned flags) {
  int i = (*count)++;
  m->specs[i] = param_spec(m->names[i], TFM_NAME_BYTES, name, rows, cols, flags);
}

// Parameter order: the three tables, the embeddings' norm, the layers, the head.
static int bert_build_specs(BertModel *m) {
  const BertShape *s = &m->shape;
  int count = 0;
  m->word = count;
  bert_spec(m, &count, "word_embeddings", s->vocab, s->d_model, 0);
  m->pos = count;
  bert_spec(m, &count, "position_embeddings", s->max_positions, s->d_model, 0);
  m->type = count;
  bert_spec(m, &count, "token_type_embeddings", s->type_vocab, s->d_model, 0);
  m->emb_ln = count;
  bert_spec(m, &count, "emb_ln_g", s->d_model, 0, PARAM_NO_DECAY);
  bert_spec(m, &count, "emb_ln_b", s->d_model, 0, PARAM_NO_DECAY);
  for (int i = 0; i < s->layers; i++) {
    char prefix[16];
    snprintf(prefix, sizeof prefix, "layer%d", i);
    tfm_layer_specs(m->specs, m->names, &count, prefix, &m->dims, false, m->layers[i].p);
  }
  m->head = count;
  bert_spec(m, &count, "span_w", 2, s->d_model, 0);
  bert_spec(m, &count, "span_b", 2, 0, PARAM_NO_DECAY);
  return count;
}

// BERT's initialisation: N(0, 0.02) for every matrix, the tables included;
// layer-norm gammas 1; biases and betas 0.
static void bert_init_params(BertModel *m, uint64_t seed) {
  const ParamSet *ps = &m->ps;
  float *host = xcalloc((size_t)ps->total_numel, sizeof(float));
  for (int i = 0; i < ps->count; i++) {
    float *p = host + ps->offsets[i];
    const char *name = ps->specs[i].name;
    size_t len = strlen(name);
    if (ps->specs[i].ndim == 2)
      rng_fill_normal_cpu(p, ps->numels[i], seed, BERT_INIT_STREAM + (uint64_t)i, 0, 0.0f,
                          BERT_INIT_STD);
    else if (len >= 2 && !strcmp(name + len - 2, "_g"))
      for (int64_t j = 0; j < ps->numels[i]; j++) p[j] = 1.0f;
  }
  device_copy(ps->device, ps->params, DEVICE_CPU, host, (size_t)ps->total_numel * sizeof(float));
  free(host);
}

static Tensor bert_buf(BertModel *m, DType dt, int64_t rows, int64_t cols) {
  return cols ? arena_tensor(&m->arena, dt, 2, (int64_t[]){rows, cols})
              : arena_tensor(&m->arena, dt, 1, (int64_t[]){rows});
}

// The layers whose activation buffers hold eval batches: the eval's layers
// run in them by turns (bert_forward).
enum { BERT_EVAL_LAYER_BUFS = 2 };

// Sequences of a training batch the buffers hold.
static int64_t train_batch(const BertShape *s) {
  return s->max_train_batch > 0 ? s->max_train_batch : s->max_batch;
}

// Every buffer, carved twice by bert_model_init: measuring, then for real.
// r rows for any forward (the eval's), rt for training's (BertShape).
static void bert_carve(BertModel *m) {
  const BertShape *s = &m->shape;
  const TfmDims *d = &m->dims;
  int64_t r = s->max_batch * s->max_len, rt = train_batch(s) * s->max_len, dm = s->d_model;
  for (int i = 0; i < s->layers; i++) {
    int64_t rows = i < BERT_EVAL_LAYER_BUFS ? r : rt;
    tfm_layer_alloc(&m->layers[i], &m->arena, d, rows, rows, s->heads * rows * s->max_len);
  }
  tfm_scratch_alloc(&m->scratch, &m->arena, d, r, rt, s->heads * r * s->max_len);
  m->ids = bert_buf(m, DT_I32, r, 0);
  m->types = bert_buf(m, DT_I32, r, 0);
  m->pos_ids = bert_buf(m, DT_I32, r, 0);
  m->len = bert_buf(m, DT_I32, s->max_batch, 0);
  m->labels = bert_buf(m, DT_I32, 2 * s->max_batch, 0);
  m->emb = bert_buf(m, DT_F32, r, dm);
  m->emb_part = bert_buf(m, DT_F32, r, dm);
  m->emb_in = d->dtype == DT_F32 ? m->emb : bert_buf(m, d->dtype, r, dm);
  m->x0 = bert_buf(m, d->dtype, r, dm);
  m->emb_mean = bert_buf(m, DT_F32, r, 0);
  m->emb_rstd = bert_buf(m, DT_F32, r, 0);
  m->logits = bert_buf(m, d->dtype, r, 2);
  m->span_logits = bert_buf(m, d->dtype, 2 * r, 0);
  m->dspan = bert_buf(m, d->dtype, 2 * rt, 0);
  m->dlogits = bert_buf(m, d->dtype, rt, 2);
  m->dx = bert_buf(m, d->dtype, rt, dm);
  m->loss = bert_buf(m, DT_F32, 1, 0);
}

void bert_model_init(BertModel *m, const BertShape *shape, int n_state, uint64_t seed,
                     DeviceKind device) {
  memset(m, 0, sizeof *m);
  m->shape = *shape;
  if (shape->layers < 1 || shape->layers > BERT_MAX_LAYERS)
    DIE("bert_model_init: 1 to %d layers", BERT_MAX_LAYERS);
  if (shape->d_model % shape->heads)
    DIE("bert_model_init: d_model %lld is not a multiple of %lld heads",
        (long long)shape->d_model, (long long)shape->heads);
  if (shape->max_train_batch < 0 || shape->max_train_batch > shape->max_batch)
    DIE("bert_model_init: training batches of %lld, buffers of %lld sequences",
        (long long)shape->max_train_batch, (long long)shape->max_batch);
  if (shape->max_len > shape->max_positions)
    DIE("bert_model_init: sequences of %lld positions, position table of %lld",
        (long long)shape->max_len, (long long)shape->max_positions);
  m->dims = (TfmDims){.d_model = shape->d_model, .d_ff = shape->d_ff, .heads = shape->heads,
                      .keep_prob = 1.0f - shape->dropout,
                      .attn_keep_prob = 1.0f - shape->attention_dropout,
                      .ln_eps = shape->ln_eps, .post_norm = true, .gelu = true,
                      .proj_bias = true, .dtype = shape->dtype,
                      .fused_attention = tfm_fused_attention(shape->fused_attention, device,
                                                             shape->dtype, shape->d_model,
                                                             shape->heads)};
  m->eval_dims = m->dims;
  m->eval_dims.keep_prob = m->eval_dims.attn_keep_prob = 1.0f;
  int count = bert_build_specs(m);
  paramset_init(&m->ps, m->specs, count, n_state, device);
  if (shape->dtype != DT_F32)
    m->lowp = device_alloc(device, (size_t)m->ps.total_numel * dtype_size(shape->dtype));
  m->w = (TfmWeights){.ps = &m->ps, .lowp = m->lowp, .dtype = shape->dtype};
  arena_init_measuring(&m->arena, "bert activations");
  bert_carve(m);
  arena_init(&m->arena, "bert activations", device, m->arena.peak_bytes);
  bert_carve(m);
  bert_init_params(m, seed);
  m->host_ids = xmalloc((size_t)(shape->max_batch * shape->max_len) * sizeof(int32_t));
}

void bert_model_free(BertModel *m) {
  free(m->host_ids);
  device_free(m->ps.device, m->lowp);
  arena_free(&m->arena);
  paramset_free(&m->ps);
  memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------- loading

// Hugging Face's name of a layer role (layer norms as `ln`: "weight"/"gamma"
// and "bias"/"beta" are both tried).
static const char *hf_role_name(TfmRole r) {
  switch (r) {
    case TFM_WQ: return "attention.self.query.weight";
    case TFM_BQ: return "attention.self.query.bias";
    case TFM_WK: return "attention.self.key.weight";
    case TFM_BK: return "attention.self.key.bias";
    case TFM_WV: return "attention.self.value.weight";
    case TFM_BV: return "attention.self.value.bias";
    case TFM_WO: return "attention.output.dense.weight";
    case TFM_BO: return "attention.output.dense.bias";
    case TFM_LN1_G: return "attention.output.LayerNorm.weight";
    case TFM_LN1_B: return "attention.output.LayerNorm.bias";
    case TFM_W1: return "intermediate.dense.weight";
    case TFM_B1: return "intermediate.dense.bias";
    case TFM_W2: return "output.dense.weight";
    case TFM_B2: return "output.dense.bias";
    case TFM_LN2_G: return "output.LayerNorm.weight";
    case TFM_LN2_B: return "output.LayerNorm.bias";
    default: return NULL;
  }
}

// Reads name (tried as is, with the "bert." prefix, and with a layer norm's
// weight/bias spelled gamma/beta) into parameter i's host copy.
static bool load_one(BertSource src, const ParamSpec *spec, const char *name, float *out) {
  const char *prefixes[] = {"", "bert."};
  for (int p = 0; p < 2; p++)
    for (int old = 0; old < 2; old++) {
      char full[160];
      snprintf(full, sizeof full, "%s%s", prefixes[p], name);
      if (old) {  // LayerNorm.weight -> LayerNorm.gamma, LayerNorm.bias -> LayerNorm.beta
        char *ln = strstr(full, "LayerNorm.");
        if (!ln) continue;
        char *field = ln + strlen("LayerNorm.");
        snprintf(field, sizeof full - (size_t)(field - full), "%s",
                 !strcmp(field, "weight") ? "gamma" : !strcmp(field, "bias") ? "beta" : field);
      }
      if (src.read(src.ctx, full, spec->ndim, spec->shape, out)) return true;
    }
  return false;
}

bool bert_model_load(BertModel *m, BertSource src, const char *what) {
  const ParamSet *ps = &m->ps;
  float *host = xmalloc((size_t)ps->total_numel * sizeof(float));
  device_copy(DEVICE_CPU, host, ps->device, ps->params, (size_t)ps->total_numel * sizeof(float));
  char name[160];
  const char *emb[][2] = {{"embeddings.word_embeddings.weight", NULL},
                          {"embeddings.position_embeddings.weight", NULL},
                          {"embeddings.token_type_embeddings.weight", NULL},
                          {"embeddings.LayerNorm.weight", NULL},
                          {"embeddings.LayerNorm.bias", NULL}};
  int emb_index[] = {m->word, m->pos, m->type, m->emb_ln, m->emb_ln + 1};
  for (int e = 0; e < 5; e++) {
    int i = emb_index[e];
    if (!load_one(src, &ps->specs[i], emb[e][0], host + ps->offsets[i]))
      die_input(what, "the checkpoint has no tensor %s", emb[e][0]);
  }
  for (int l = 0; l < m->shape.layers; l++)
    for (int r = 0; r < TFM_ROLES; r++) {
      int i = m->layers[l].p[r];
      if (i < 0) continue;
      snprintf(name, sizeof name, "encoder.layer.%d.%s", l, hf_role_name((TfmRole)r));
      if (!load_one(src, &ps->specs[i], name, host + ps->offsets[i]))
        die_input(what, "the checkpoint has no tensor %s", name);
    }
  bool head = load_one(src, &ps->specs[m->head], "qa_outputs.weight", host + ps->offsets[m->head]);
  if (head && !load_one(src, &ps->specs[m->head + 1], "qa_outputs.bias",
                        host + ps->offsets[m->head + 1]))
    die_input(what, "the checkpoint has qa_outputs.weight but no qa_outputs.bias");
  device_copy(ps->device, ps->params, DEVICE_CPU, host, (size_t)ps->total_numel * sizeof(float));
  free(host);
  return head;
}

static bool safetensors_source(void *ctx, const char *name, int ndim, const int64_t *shape,
                               float *out) {
  const SafeTensors *st = ctx;
  if (!safetensors_find(st, name)) return false;
  safetensors_read_f32(st, name, ndim, shape, out);
  return true;
}

bool bert_model_load_safetensors(BertModel *m, const char *path) {
  SafeTensors st;
  safetensors_open(&st, path);
  bool head = bert_model_load(m, (BertSource){safetensors_source, &st}, path);
  safetensors_close(&st);
  return head;
}

// ---------------------------------------------------------------- inputs

static Tensor rows_of(const Tensor *t, int64_t n) {
  Tensor v = *t;
  v.shape[0] = n;
  if (n > t->shape[0]) DIE("bert: %lld rows on a buffer of %lld", (long long)n, (long long)t->shape[0]);
  return v;
}

static void upload(const BertModel *m, const Tensor *dst, const int32_t *host, int64_t n) {
  Tensor v = rows_of(dst, n);
  device_copy(m->ps.device, v.data, DEVICE_CPU, host, (size_t)n * sizeof(int32_t));
}

static void bert_upload_batch(BertModel *m, const BertBatch *bt) {
  const BertShape *s = &m->shape;
  if (bt->b > s->max_batch || bt->t > s->max_len || bt->b < 1 || bt->t < 1)
    DIE("bert: a batch of %lld x %lld exceeds the buffers (%lld x %lld)", (long long)bt->b,
        (long long)bt->t, (long long)s->max_batch, (long long)s->max_len);
  int64_t r = bt->b * bt->t;
  for (int64_t i = 0; i < r; i++)
    if (bt->ids[i] < 0 || bt->ids[i] >= s->vocab || bt->types[i] < 0 || bt->types[i] >= s->type_vocab)
      DIE("bert: token %lld of the batch: id %d or type %d outside the tables", (long long)i,
          bt->ids[i], bt->types[i]);
  upload(m, &m->ids, bt->ids, r);
  upload(m, &m->types, bt->types, r);
  upload(m, &m->len, bt->len, bt->b);
  for (int64_t i = 0; i < r; i++) m->host_ids[i] = (int32_t)(i % bt->t);
  upload(m, &m->pos_ids, m->host_ids, r);
  if (bt->start) {
    memcpy(m->host_ids, bt->start, (size_t)bt->b * sizeof(int32_t));
    memcpy(m->host_ids + bt->b, bt->end, (size_t)bt->b * sizeof(int32_t));
    upload(m, &m->labels, m->host_ids, 2 * bt->b);
  }
}

static Tensor weight(const BertModel *m, int i) {
  if (m->lowp && m->specs[i].ndim == 2) return amp_weight_view(&m->ps, m->lowp, m->dims.dtype, 0, i);
  return paramset_param(&m->ps, i);
}

// ---------------------------------------------------------------- forward

static TfmPass bert_pass(const BertModel *m, const Device *dev, const TfmDims *d,
                         const BertBatch *bt, uint64_t seed, uint64_t stream) {
  return (TfmPass){.dev = dev, .d = d, .w = &m->w, .b = bt->b, .t = bt->t, .tk = bt->t,
                   .key_len = &m->len, .keep_prob = d->keep_prob,
                   .attn_keep_prob = d->attn_keep_prob, .seed = seed, .stream = stream};
}

static uint64_t layer_stream(uint64_t base, int layer) {
  return base + BERT_DROP_LAYERS + TFM_DROP_STREAMS * (uint64_t)layer;
}

// x0 = dropout(LN(W[ids] + P[pos] + T[types])).
static void bert_embed(BertModel *m, const Device *dev, const TfmDims *d, int64_t r,
                       uint64_t seed, uint64_t base) {
  int64_t dm = m->shape.d_model;
  Tensor ids = rows_of(&m->ids, r), pos = rows_of(&m->pos_ids, r), types = rows_of(&m->types, r);
  Tensor e = tfm_view2(&m->emb, r, dm), part = tfm_view2(&m->emb_part, r, dm);
  Tensor in = tfm_view2(&m->emb_in, r, dm), x0 = tfm_view2(&m->x0, r, dm);
  Tensor word = paramset_param(&m->ps, m->word), ptab = paramset_param(&m->ps, m->pos);
  Tensor ttab = paramset_param(&m->ps, m->type);
  op_embedding_fwd(dev, &ids, &word, &e);
  op_embedding_fwd(dev, &pos, &ptab, &part);
  op_add(dev, &e, &part, &e);
  op_embedding_fwd(dev, &types, &ttab, &part);
  op_add(dev, &e, &part, &e);
  if (m->lowp) op_cast(dev, &e, &in);
  Tensor g = paramset_param(&m->ps, m->emb_ln), b = paramset_param(&m->ps, m->emb_ln + 1);
  Tensor mean = rows_of(&m->emb_mean, r), rstd = rows_of(&m->emb_rstd, r);
  op_layernorm_fwd(dev, &in, &g, &b, m->shape.ln_eps, &x0, &mean, &rstd);
  if (d->keep_prob < 1.0f) op_dropout_fwd(dev, &x0, &x0, d->keep_prob, seed, base + BERT_DROP_EMB);
}

// The span logits (2, B, T) of the last layer's output.
// eval: nothing is kept for a backward pass, and layer i runs in the
// activation buffers of layer i % BERT_EVAL_LAYER_BUFS, those carved for eval
// batches (layer i - 1's output is its input; layer i - 2's buffers are free).
static void bert_forward(BertModel *m, const Device *dev, const BertBatch *bt, const TfmDims *d,
                         uint64_t seed, uint64_t base, bool eval) {
  const BertShape *s = &m->shape;
  int64_t r = bt->b * bt->t, dm = s->d_model;
  if (m->lowp) amp_cast(dev, m->ps.params, m->lowp, s->dtype, m->ps.total_numel);
  bert_embed(m, dev, d, r, seed, base);
  Tensor x = m->x0;
  for (int i = 0; i < s->layers; i++) {
    TfmPass p = bert_pass(m, dev, d, bt, seed, layer_stream(base, i));
    TfmLayer layer = m->layers[i];
    if (eval) {
      const TfmLayer *bufs = &m->layers[i % BERT_EVAL_LAYER_BUFS];
      layer.self = bufs->self, layer.xattn = bufs->xattn, layer.ffn = bufs->ffn;
    }
    Tensor xv = tfm_view2(&x, r, dm);
    tfm_layer_fwd(&layer, &p, &m->scratch, &xv, NULL);
    x = layer.ffn.out;
  }
  m->hidden = x;
  Tensor out = tfm_view2(&x, r, dm), w = weight(m, m->head);
  Tensor b = paramset_param(&m->ps, m->head + 1);
  Tensor logits = tfm_view2(&m->logits, r, 2);
  op_linear_fwd(dev, &out, &w, &b, &logits);
  // (B, T, 2) -> (2, B, T): a row per sequence and end.
  Tensor l3 = logits, span = m->span_logits;
  l3.ndim = 3, l3.shape[0] = bt->b, l3.shape[1] = bt->t, l3.shape[2] = 2;
  span.ndim = 3, span.shape[0] = 2, span.shape[1] = bt->b, span.shape[2] = bt->t;
  op_permute(dev, &l3, (const int[]){2, 0, 1}, &span);
}

void bert_model_eval(BertModel *m, const Device *dev, const BertBatch *batch) {
  bert_upload_batch(m, batch);
  bert_forward(m, dev, batch, &m->eval_dims, 0, 0, true);
}

// ---------------------------------------------------------------- training

static void bert_backward(BertModel *m, const Device *dev, const BertBatch *bt, uint64_t seed,
                          uint64_t base) {
  const BertShape *s = &m->shape;
  const TfmDims *d = &m->dims;
  int64_t r = bt->b * bt->t, dm = s->d_model;
  // (2, B, T) -> (B, T, 2), then the head.
  Tensor dspan = m->dspan, dl3 = m->dlogits;
  dspan.ndim = 3, dspan.shape[0] = 2, dspan.shape[1] = bt->b, dspan.shape[2] = bt->t;
  dl3.ndim = 3, dl3.shape[0] = bt->b, dl3.shape[1] = bt->t, dl3.shape[2] = 2;
  op_permute(dev, &dspan, (const int[]){1, 2, 0}, &dl3);
  const Tensor *last = &m->layers[s->layers - 1].ffn.out;
  Tensor out = tfm_view2(last, r, dm), w = weight(m, m->head), dlogits = tfm_view2(&m->dlogits, r, 2);
  Tensor dw = paramset_grad(&m->ps, m->head), db = paramset_grad(&m->ps, m->head + 1);
  Tensor dx = tfm_view2(&m->dx, r, dm);
  op_linear_bwd(dev, &out, &w, &dlogits, &dx, &dw, &db, true);
  for (int i = s->layers - 1; i >= 0; i--) {
    TfmPass p = bert_pass(m, dev, d, bt, seed, layer_stream(base, i));
    Tensor x = tfm_view2(i ? &m->layers[i - 1].ffn.out : &m->x0, r, dm);
    tfm_layer_bwd(&m->layers[i], &p, &m->scratch, &x, NULL, &dx, NULL);
  }
  // The embeddings: dropout, the norm, then each table gets the sum's gradient.
  if (d->keep_prob < 1.0f) op_dropout_bwd(dev, &dx, &dx, d->keep_prob, seed, base + BERT_DROP_EMB);
  Tensor in = tfm_view2(&m->emb_in, r, dm), g = paramset_param(&m->ps, m->emb_ln);
  Tensor dg = paramset_grad(&m->ps, m->emb_ln), dbeta = paramset_grad(&m->ps, m->emb_ln + 1);
  Tensor mean = rows_of(&m->emb_mean, r), rstd = rows_of(&m->emb_rstd, r);
  Tensor de = tfm_view2(&m->scratch.dtmp, r, dm);
  op_layernorm_bwd(dev, &in, &g, &mean, &rstd, &dx, &de, &dg, &dbeta, true);
  Tensor ids = rows_of(&m->ids, r), pos = rows_of(&m->pos_ids, r), types = rows_of(&m->types, r);
  Tensor dword = paramset_grad(&m->ps, m->word), dpos = paramset_grad(&m->ps, m->pos);
  Tensor dtype = paramset_grad(&m->ps, m->type);
  op_embedding_bwd(dev, &ids, &de, &dword, true);
  // The pad token's row keeps its pretrained value (Hugging Face's
  // padding_idx): its gradient is zero.
  device_zero(dev->kind, (float *)dword.data + m->shape.pad_id * dm, (size_t)dm * sizeof(float));
  op_embedding_bwd(dev, &pos, &de, &dpos, true);
  op_embedding_bwd(dev, &types, &de, &dtype, true);
}

void bert_model_train_step(BertModel *m, const Device *dev, const BertBatch *batch,
                           float loss_scale, uint64_t seed, int64_t step, GradHook hook) {
  if (!batch->start || !batch->end) DIE("bert: a training batch without answer positions");
  if (batch->b > train_batch(&m->shape))
    DIE("bert: a training batch of %lld sequences exceeds the training buffers (%lld)",
        (long long)batch->b, (long long)train_batch(&m->shape));
  uint64_t base = (uint64_t)step << BERT_STREAM_BITS;
  bert_upload_batch(m, batch);
  bert_forward(m, dev, batch, &m->dims, seed, base, false);
  // One row per (sequence, start or end): the mean over the 2B rows is
  // (mean CE(start) + mean CE(end)) / 2.
  int64_t rows = 2 * batch->b;
  Tensor span = tfm_view2(&m->span_logits, rows, batch->t), dspan = tfm_view2(&m->dspan, rows, batch->t);
  Tensor labels = rows_of(&m->labels, rows);
  op_softmax_xent(dev, &span, &labels, 0.0f, -1, loss_scale, &m->loss, NULL, &dspan);
  Tensor grads = {.data = m->ps.grads, .dtype = DT_F32, .device = m->ps.device, .ndim = 1,
                  .shape = {m->ps.total_numel}};
  device_zero(dev->kind, grads.data, tensor_bytes(&grads));
  bert_backward(m, dev, batch, seed, base);
  if (hook.ready)
    for (int i = m->ps.count - 1; i >= 0; i--) hook.ready(hook.ctx, i);
}
