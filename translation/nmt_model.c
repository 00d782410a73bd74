// nmt_model.c: the translation Transformer's parameters, training step and
// incremental decoding, over models/transformer.h and the op library.
#include "nmt_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/activation.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "subword.h"
#include "train/amp.h"

#define NMT_LN_EPS 1e-6f
// Dropout streams of a step: the two embedded inputs, then TFM_DROP_STREAMS
// per layer; a step's streams start at step << NMT_STREAM_BITS.
#define NMT_STREAM_BITS 10
enum { NMT_DROP_SRC, NMT_DROP_TGT, NMT_DROP_LAYERS };
#define NMT_INIT_STREAM 300  // parameter init streams: 300 + 32 per layer

static void nmt_spec(NmtModel *m, int *count, const char *name, int64_t rows, int64_t cols,
                     unsigned flags) {
  int i = (*count)++;
  m->specs[i] = param_spec(m->names[i], TFM_NAME_BYTES, name, rows, cols, flags);
}

// Parameter order: the embedding, the encoder layers and its final norm,
// the decoder layers and its final norm.
static int nmt_build_specs(NmtModel *m) {
  const NmtShape *s = &m->shape;
  int count = 0;
  char prefix[16];
  m->emb = count;
  nmt_spec(m, &count, "embedding", s->vocab, s->d_model, 0);
  for (int i = 0; i < s->enc_layers; i++) {
    snprintf(prefix, sizeof prefix, "enc%d", i);
    tfm_layer_specs(m->specs, m->names, &count, prefix, &m->dims, false, m->enc[i].p);
  }
  m->enc_ln = count;
  nmt_spec(m, &count, "enc_ln_g", s->d_model, 0, PARAM_NO_DECAY);
  nmt_spec(m, &count, "enc_ln_b", s->d_model, 0, PARAM_NO_DECAY);
  for (int i = 0; i < s->dec_layers; i++) {
    snprintf(prefix, sizeof prefix, "dec%d", i);
    m->dec[i].cross = true;
    tfm_layer_specs(m->specs, m->names, &count, prefix, &m->dims, true, m->dec[i].p);
  }
  m->dec_ln = count;
  nmt_spec(m, &count, "dec_ln_g", s->d_model, 0, PARAM_NO_DECAY);
  nmt_spec(m, &count, "dec_ln_b", s->d_model, 0, PARAM_NO_DECAY);
  return count;
}

static void nmt_init_params(NmtModel *m, uint64_t seed) {
  const ParamSet *ps = &m->ps;
  const NmtShape *s = &m->shape;
  float *host = xcalloc((size_t)ps->total_numel, sizeof(float));  // (total_numel)
  rng_fill_normal_cpu(host + ps->offsets[m->emb], ps->numels[m->emb], seed, NMT_INIT_STREAM, 0,
                      0.0f, (float)(1.0 / sqrt((double)s->d_model)));
  for (int i = 0; i < s->enc_layers; i++)
    tfm_layer_init(host, ps, m->enc[i].p, seed, NMT_INIT_STREAM + 32 * (uint64_t)(1 + i));
  for (int i = 0; i < s->dec_layers; i++)
    tfm_layer_init(host, ps, m->dec[i].p, seed,
                   NMT_INIT_STREAM + 32 * (uint64_t)(1 + s->enc_layers + i));
  for (int ln = 0; ln < 2; ln++) {
    int g = ln ? m->dec_ln : m->enc_ln;
    for (int64_t j = 0; j < s->d_model; j++) host[ps->offsets[g] + j] = 1.0f;
  }
  device_copy(ps->device, ps->params, DEVICE_CPU, host, (size_t)ps->total_numel * sizeof(float));
  free(host);
}

// The reference's position signal: channel c < D/2 is sin(pos * w_c), channel
// D/2 + c is cos(pos * w_c), w_c = 10000^(-c / (D/2 - 1)).
static void nmt_fill_positions(NmtModel *m) {
  int64_t len = m->shape.max_len, dm = m->shape.d_model, half = dm / 2;
  float *host = xmalloc((size_t)(len * dm) * sizeof(float));  // (max_len, D)
  double step = log(10000.0) / (double)(half > 1 ? half - 1 : 1);
  for (int64_t pos = 0; pos < len; pos++)
    for (int64_t c = 0; c < half; c++) {
      double angle = (double)pos * exp(-(double)c * step);
      host[pos * dm + c] = (float)sin(angle);
      host[pos * dm + half + c] = (float)cos(angle);
    }
  void *dst = xmalloc((size_t)(len * dm) * dtype_size(m->dims.dtype));
  for (int64_t i = 0; i < len * dm; i++) dtype_store_f32(dst, m->dims.dtype, i, host[i]);
  device_copy(m->ps.device, m->positions.data, DEVICE_CPU, dst, tensor_bytes(&m->positions));
  free(dst);
  free(host);
}

// The two rows (0s, 1s) the pad mask is looked up from, in fp32 and in the
// activation dtype.
static void nmt_fill_kept_tables(NmtModel *m) {
  int64_t dm = m->shape.d_model;
  const Tensor *tables[2] = {&m->kept_table, &m->kept_table_lowp};
  for (int k = 0; k < 2; k++) {
    DType dt = tables[k]->dtype;
    void *host = xmalloc((size_t)(2 * dm) * dtype_size(dt));  // (2, D)
    for (int64_t i = 0; i < 2 * dm; i++) dtype_store_f32(host, dt, i, i < dm ? 0.0f : 1.0f);
    device_copy(m->ps.device, tables[k]->data, DEVICE_CPU, host, tensor_bytes(tables[k]));
    free(host);
  }
}

static Tensor nmt_buf(NmtModel *m, DType dt, int64_t rows, int64_t cols) {
  return cols ? arena_tensor(&m->arena, dt, 2, (int64_t[]){rows, cols})
              : arena_tensor(&m->arena, dt, 1, (int64_t[]){rows});
}

// Every buffer, carved twice by nmt_model_init: measuring, then for real.
static void nmt_carve(NmtModel *m) {
  const NmtShape *s = &m->shape;
  const TfmDims *d = &m->dims;
  int64_t r = s->max_rows, dm = s->d_model, seqs = s->max_decode_seqs;
  int64_t rows = r > seqs ? r : seqs;  // decoding runs a hypothesis per row
  int64_t probs = s->heads * rows * s->max_len;
  for (int i = 0; i < s->enc_layers; i++) tfm_layer_alloc(&m->enc[i], &m->arena, d, rows, rows, probs);
  // Decoding reads its keys and values from the caches, never from a
  // layer's key rows: rows bound every layer buffer and the scratch.
  for (int i = 0; i < s->dec_layers; i++) {
    tfm_layer_alloc(&m->dec[i], &m->arena, d, rows, rows, probs);
    tfm_cache_alloc(&m->cache[i], &m->arena, d, seqs, s->max_len, s->max_len);
  }
  tfm_scratch_alloc(&m->scratch, &m->arena, d, rows, rows, probs);
  m->src = nmt_buf(m, DT_I32, rows, 0);
  m->tgt_in = nmt_buf(m, DT_I32, rows, 0);
  m->tgt_out = nmt_buf(m, DT_I32, rows, 0);
  m->src_pos = nmt_buf(m, DT_I32, rows, 0);
  m->tgt_pos = nmt_buf(m, DT_I32, rows, 0);
  m->src_len = nmt_buf(m, DT_I32, rows, 0);
  m->beam_rows = nmt_buf(m, DT_I32, seqs, 0);
  m->src_kept = nmt_buf(m, DT_I32, rows, 0);
  m->tgt_kept = nmt_buf(m, DT_I32, rows, 0);
  m->kept_table = nmt_buf(m, DT_F32, 2, dm);
  m->kept_table_lowp = d->dtype == DT_F32 ? m->kept_table : nmt_buf(m, d->dtype, 2, dm);
  m->kept_rows = nmt_buf(m, DT_F32, rows, dm);
  m->positions = nmt_buf(m, d->dtype, s->max_len, dm);
  m->emb_f32 = nmt_buf(m, DT_F32, rows, dm);
  m->pos_rows = nmt_buf(m, d->dtype, rows, dm);
  m->x_src = nmt_buf(m, d->dtype, rows, dm);
  m->x_tgt = nmt_buf(m, d->dtype, rows, dm);
  m->enc_out = nmt_buf(m, d->dtype, rows, dm);
  m->dec_out = nmt_buf(m, d->dtype, rows, dm);
  m->enc_mean = nmt_buf(m, DT_F32, rows, 0);
  m->enc_rstd = nmt_buf(m, DT_F32, rows, 0);
  m->dec_mean = nmt_buf(m, DT_F32, rows, 0);
  m->dec_rstd = nmt_buf(m, DT_F32, rows, 0);
  m->logits = nmt_buf(m, d->dtype, rows, s->vocab);
  m->dlogits = nmt_buf(m, d->dtype, r, s->vocab);
  m->loss = nmt_buf(m, DT_F32, 1, 0);
  m->d_enc = nmt_buf(m, d->dtype, r, dm);
  m->d_dec = nmt_buf(m, d->dtype, r, dm);
  m->d_x = nmt_buf(m, d->dtype, r, dm);
  m->mem = nmt_buf(m, d->dtype, seqs * s->max_len, dm);
}

void nmt_model_init(NmtModel *m, const NmtShape *shape, int n_state, uint64_t seed,
                    DeviceKind device) {
  memset(m, 0, sizeof *m);
  m->shape = *shape;
  if (shape->enc_layers < 1 || shape->enc_layers > NMT_MAX_LAYERS || shape->dec_layers < 1 ||
      shape->dec_layers > NMT_MAX_LAYERS)
    DIE("nmt_model_init: 1 to %d layers per stack", NMT_MAX_LAYERS);
  if (shape->d_model % shape->heads || shape->d_model % 2)
    DIE("nmt_model_init: d_model %lld is not an even multiple of %lld heads",
        (long long)shape->d_model, (long long)shape->heads);
  m->dims = (TfmDims){.d_model = shape->d_model, .d_ff = shape->d_ff, .heads = shape->heads,
                      .keep_prob = 1.0f - shape->dropout,
                      .attn_keep_prob = 1.0f - shape->attention_dropout, .ln_eps = NMT_LN_EPS,
                      .dtype = shape->dtype,
                      .fused_attention = tfm_fused_attention(shape->fused_attention, device,
                                                             shape->dtype, shape->d_model,
                                                             shape->heads)};
  m->eval_dims = m->dims;
  m->eval_dims.keep_prob = m->eval_dims.attn_keep_prob = 1.0f;
  int count = nmt_build_specs(m);
  paramset_init(&m->ps, m->specs, count, n_state, device);
  if (shape->dtype != DT_F32)
    m->lowp = device_alloc(device, (size_t)m->ps.total_numel * dtype_size(shape->dtype));
  m->w = (TfmWeights){.ps = &m->ps, .lowp = m->lowp, .dtype = shape->dtype};
  // Measure, then carve.
  arena_init_measuring(&m->arena, "nmt activations");
  nmt_carve(m);
  arena_init(&m->arena, "nmt activations", device, m->arena.peak_bytes);
  nmt_carve(m);
  nmt_init_params(m, seed);
  nmt_fill_positions(m);
  nmt_fill_kept_tables(m);
  m->host_ids = xmalloc((size_t)(2 * shape->max_rows + shape->max_decode_seqs) * sizeof(int32_t));
}

void nmt_model_free(NmtModel *m) {
  free(m->host_ids);
  device_free(m->ps.device, m->lowp);
  arena_free(&m->arena);
  paramset_free(&m->ps);
  memset(m, 0, sizeof *m);
}

// ---------------------------------------------------------------- inputs

static Tensor rows_of(const Tensor *t, int64_t n) {
  Tensor v = *t;
  v.shape[0] = n;
  if (n > t->shape[0]) DIE("nmt: %lld rows on a buffer of %lld", (long long)n, (long long)t->shape[0]);
  return v;
}

static void upload(const NmtModel *m, const Tensor *dst, const int32_t *host, int64_t n) {
  Tensor v = rows_of(dst, n);
  device_copy(m->ps.device, v.data, DEVICE_CPU, host, (size_t)n * sizeof(int32_t));
}

// Position ids 0..len-1 of each of b sequences, into dst.
static void upload_positions(NmtModel *m, const Tensor *dst, int64_t b, int64_t len,
                             int64_t first) {
  for (int64_t i = 0; i < b * len; i++) m->host_ids[i] = (int32_t)(first + i % len);
  upload(m, dst, m->host_ids, b * len);
}

// 1 for each id that is a token, 0 for a pad, into dst.
static void upload_kept(NmtModel *m, const Tensor *dst, const int32_t *ids, int64_t n) {
  for (int64_t i = 0; i < n; i++) m->host_ids[i] = ids[i] != SUBWORD_PAD;
  upload(m, dst, m->host_ids, n);
}

static void nmt_upload_batch(NmtModel *m, const WmtBatch *bt) {
  if (bt->b * bt->s > m->shape.max_rows || bt->b * bt->t > m->shape.max_rows ||
      bt->s > m->shape.max_len || bt->t > m->shape.max_len)
    DIE("nmt: a batch of %lld x (%lld, %lld) exceeds the buffers (%lld rows, %lld positions)",
        (long long)bt->b, (long long)bt->s, (long long)bt->t, (long long)m->shape.max_rows,
        (long long)m->shape.max_len);
  upload(m, &m->src, bt->src, bt->b * bt->s);
  upload(m, &m->tgt_in, bt->tgt_in, bt->b * bt->t);
  upload(m, &m->tgt_out, bt->tgt_out, bt->b * bt->t);
  upload(m, &m->src_len, bt->src_len, bt->b);
  upload_kept(m, &m->src_kept, bt->src, bt->b * bt->s);
  upload_kept(m, &m->tgt_kept, bt->tgt_in, bt->b * bt->t);
  upload_positions(m, &m->src_pos, bt->b, bt->s, 0);
  upload_positions(m, &m->tgt_pos, bt->b, bt->t, 0);
}

static Tensor weight(const NmtModel *m, int i) {
  if (m->lowp && m->specs[i].ndim == 2) return amp_weight_view(&m->ps, m->lowp, m->dims.dtype, 0, i);
  return paramset_param(&m->ps, i);
}

// x = dropout(E[ids] kept sqrt(D) + P[pos]) for n rows (kept: 0 for a pad).
static void nmt_embed(const NmtModel *m, const Device *dev, const Tensor *ids, const Tensor *kept,
                      const Tensor *pos, int64_t n, const Tensor *x, float keep, uint64_t seed,
                      uint64_t stream) {
  int64_t dm = m->shape.d_model;
  Tensor id = rows_of(ids, n), ps = rows_of(pos, n), kp = rows_of(kept, n);
  Tensor e = tfm_view2(&m->emb_f32, n, dm), out = tfm_view2(x, n, dm);
  Tensor p = tfm_view2(&m->pos_rows, n, dm), table = paramset_param(&m->ps, m->emb);
  Tensor mask = tfm_view2(&m->kept_rows, n, dm);
  op_embedding_fwd(dev, &id, &table, &e);
  op_embedding_fwd(dev, &kp, &m->kept_table, &mask);
  op_mul(dev, &e, &mask, &e);
  op_scale(dev, &e, sqrtf((float)dm), &e);
  if (m->lowp) op_cast(dev, &e, &out);
  op_embedding_fwd(dev, &ps, &m->positions, &p);
  op_add(dev, m->lowp ? &out : &e, &p, &out);
  if (keep < 1.0f) op_dropout_fwd(dev, &out, &out, keep, seed, stream);
}

// dE[ids] += sqrt(D) kept dropout_bwd(dx) (dx is overwritten).
static void nmt_embed_bwd(const NmtModel *m, const Device *dev, const Tensor *ids,
                          const Tensor *kept, int64_t n, const Tensor *dx, float keep,
                          uint64_t seed, uint64_t stream) {
  int64_t dm = m->shape.d_model;
  Tensor id = rows_of(ids, n), kp = rows_of(kept, n), d = tfm_view2(dx, n, dm);
  Tensor mask = tfm_view2(&m->pos_rows, n, dm), dtable = paramset_grad(&m->ps, m->emb);
  if (keep < 1.0f) op_dropout_bwd(dev, &d, &d, keep, seed, stream);
  op_embedding_fwd(dev, &kp, &m->kept_table_lowp, &mask);
  op_mul(dev, &d, &mask, &d);
  op_scale(dev, &d, sqrtf((float)dm), &d);
  op_embedding_bwd(dev, &id, &d, &dtable, true);
}

static void final_norm_fwd(const NmtModel *m, const Device *dev, int g, const Tensor *x,
                           const Tensor *y, const Tensor *mean, const Tensor *rstd, int64_t n) {
  int64_t dm = m->shape.d_model;
  Tensor gamma = paramset_param(&m->ps, g), beta = paramset_param(&m->ps, g + 1);
  Tensor xv = tfm_view2(x, n, dm), yv = tfm_view2(y, n, dm);
  Tensor mv = rows_of(mean, n), rv = rows_of(rstd, n);
  op_layernorm_fwd(dev, &xv, &gamma, &beta, NMT_LN_EPS, &yv, &mv, &rv);
}

static void final_norm_bwd(const NmtModel *m, const Device *dev, int g, const Tensor *x,
                           const Tensor *mean, const Tensor *rstd, const Tensor *dy,
                           const Tensor *dx, int64_t n) {
  int64_t dm = m->shape.d_model;
  Tensor gamma = paramset_param(&m->ps, g);
  Tensor dg = paramset_grad(&m->ps, g), db = paramset_grad(&m->ps, g + 1);
  Tensor xv = tfm_view2(x, n, dm), dyv = tfm_view2(dy, n, dm), dxv = tfm_view2(dx, n, dm);
  Tensor mv = rows_of(mean, n), rv = rows_of(rstd, n);
  op_layernorm_bwd(dev, &xv, &gamma, &mv, &rv, &dyv, &dxv, &dg, &db, true);
}

// ---------------------------------------------------------------- training

static TfmPass nmt_pass(const NmtModel *m, const Device *dev, const TfmDims *d, int64_t b,
                        int64_t t, int64_t tk, uint64_t seed, uint64_t stream) {
  return (TfmPass){.dev = dev, .d = d, .w = &m->w, .b = b, .t = t, .tk = tk,
                   .key_len = &m->src_len, .keep_prob = d->keep_prob,
                   .attn_keep_prob = d->attn_keep_prob, .seed = seed,
                   .stream = stream};
}

static uint64_t layer_stream(uint64_t base, int layer) {
  return base + NMT_DROP_LAYERS + TFM_DROP_STREAMS * (uint64_t)layer;
}

// Both stacks over the uploaded batch; the decoder's final norm in dec_out.
static void nmt_forward(NmtModel *m, const Device *dev, const WmtBatch *bt, const TfmDims *d,
                        uint64_t seed, uint64_t base) {
  const NmtShape *s = &m->shape;
  int64_t rs = bt->b * bt->s, rt = bt->b * bt->t;
  if (m->lowp) amp_cast(dev, m->ps.params, m->lowp, s->dtype, m->ps.total_numel);
  nmt_embed(m, dev, &m->src, &m->src_kept, &m->src_pos, rs, &m->x_src, d->keep_prob, seed,
            base + NMT_DROP_SRC);
  const Tensor *x = &m->x_src;
  for (int i = 0; i < s->enc_layers; i++) {
    TfmPass p = nmt_pass(m, dev, d, bt->b, bt->s, bt->s, seed, layer_stream(base, i));
    Tensor xv = tfm_view2(x, rs, s->d_model);
    tfm_layer_fwd(&m->enc[i], &p, &m->scratch, &xv, NULL);
    x = &m->enc[i].ffn.out;
  }
  final_norm_fwd(m, dev, m->enc_ln, x, &m->enc_out, &m->enc_mean, &m->enc_rstd, rs);
  Tensor mem = tfm_view2(&m->enc_out, rs, s->d_model);
  nmt_embed(m, dev, &m->tgt_in, &m->tgt_kept, &m->tgt_pos, rt, &m->x_tgt, d->keep_prob, seed,
            base + NMT_DROP_TGT);
  x = &m->x_tgt;
  for (int i = 0; i < s->dec_layers; i++) {
    TfmPass p = nmt_pass(m, dev, d, bt->b, bt->t, bt->s, seed, layer_stream(base, s->enc_layers + i));
    Tensor xv = tfm_view2(x, rt, s->d_model);
    tfm_layer_fwd(&m->dec[i], &p, &m->scratch, &xv, &mem);
    x = &m->dec[i].ffn.out;
  }
  final_norm_fwd(m, dev, m->dec_ln, x, &m->dec_out, &m->dec_mean, &m->dec_rstd, rt);
}

// Logits of the decoder output and the loss (and its gradient in dlogits).
static void nmt_loss(NmtModel *m, const Device *dev, int64_t rt, float smoothing, float scale) {
  Tensor out = tfm_view2(&m->dec_out, rt, m->shape.d_model), emb = weight(m, m->emb);
  Tensor logits = tfm_view2(&m->logits, rt, m->shape.vocab);
  Tensor dlogits = tfm_view2(&m->dlogits, rt, m->shape.vocab), labels = rows_of(&m->tgt_out, rt);
  op_linear_fwd(dev, &out, &emb, NULL, &logits);
  op_softmax_xent(dev, &logits, &labels, smoothing, SUBWORD_PAD, scale, &m->loss, NULL, &dlogits);
}

static void nmt_backward(NmtModel *m, const Device *dev, const WmtBatch *bt, uint64_t seed,
                         uint64_t base) {
  const NmtShape *s = &m->shape;
  const TfmDims *d = &m->dims;
  int64_t rs = bt->b * bt->s, rt = bt->b * bt->t, dm = s->d_model;
  Tensor out = tfm_view2(&m->dec_out, rt, dm), emb = weight(m, m->emb);
  Tensor demb = paramset_grad(&m->ps, m->emb), dlogits = tfm_view2(&m->dlogits, rt, s->vocab);
  Tensor d_out = tfm_view2(&m->d_x, rt, dm), dy = tfm_view2(&m->d_dec, rt, dm);
  op_linear_bwd(dev, &out, &emb, &dlogits, &d_out, &demb, NULL, true);
  const Tensor *last = s->dec_layers ? &m->dec[s->dec_layers - 1].ffn.out : &m->x_tgt;
  final_norm_bwd(m, dev, m->dec_ln, last, &m->dec_mean, &m->dec_rstd, &d_out, &dy, rt);
  Tensor dmem = tfm_view2(&m->d_enc, rs, dm), mem = tfm_view2(&m->enc_out, rs, dm);
  device_zero(dev->kind, dmem.data, tensor_bytes(&dmem));
  for (int i = s->dec_layers - 1; i >= 0; i--) {
    TfmPass p = nmt_pass(m, dev, d, bt->b, bt->t, bt->s, seed, layer_stream(base, s->enc_layers + i));
    Tensor x = tfm_view2(i ? &m->dec[i - 1].ffn.out : &m->x_tgt, rt, dm);
    tfm_layer_bwd(&m->dec[i], &p, &m->scratch, &x, &mem, &dy, &dmem);
  }
  nmt_embed_bwd(m, dev, &m->tgt_in, &m->tgt_kept, rt, &dy, d->keep_prob, seed, base + NMT_DROP_TGT);
  Tensor dx = tfm_view2(&m->d_x, rs, dm);
  final_norm_bwd(m, dev, m->enc_ln, &m->enc[s->enc_layers - 1].ffn.out, &m->enc_mean,
                 &m->enc_rstd, &dmem, &dx, rs);
  for (int i = s->enc_layers - 1; i >= 0; i--) {
    TfmPass p = nmt_pass(m, dev, d, bt->b, bt->s, bt->s, seed, layer_stream(base, i));
    Tensor x = tfm_view2(i ? &m->enc[i - 1].ffn.out : &m->x_src, rs, dm);
    tfm_layer_bwd(&m->enc[i], &p, &m->scratch, &x, NULL, &dx, NULL);
  }
  nmt_embed_bwd(m, dev, &m->src, &m->src_kept, rs, &dx, d->keep_prob, seed, base + NMT_DROP_SRC);
}

void nmt_model_train_step(NmtModel *m, const Device *dev, const WmtBatch *batch,
                          float loss_scale, uint64_t seed, int64_t step, GradHook hook) {
  uint64_t base = (uint64_t)step << NMT_STREAM_BITS;
  nmt_upload_batch(m, batch);
  nmt_forward(m, dev, batch, &m->dims, seed, base);
  nmt_loss(m, dev, batch->b * batch->t, m->shape.label_smoothing, loss_scale);
  Tensor grads = {.data = m->ps.grads, .dtype = DT_F32, .device = m->ps.device, .ndim = 1,
                  .shape = {m->ps.total_numel}};
  device_zero(dev->kind, grads.data, tensor_bytes(&grads));
  nmt_backward(m, dev, batch, seed, base);
  if (hook.ready)
    for (int i = m->ps.count - 1; i >= 0; i--) hook.ready(hook.ctx, i);
}

void nmt_model_eval_loss(NmtModel *m, const Device *dev, const WmtBatch *batch) {
  nmt_upload_batch(m, batch);
  nmt_forward(m, dev, batch, &m->eval_dims, 0, 0);
  nmt_loss(m, dev, batch->b * batch->t, 0.0f, 1.0f);
}

// ---------------------------------------------------------------- decoding

// dst rows i = src rows rows[i] (host ids), src viewed as (n_src, row_elems).
static void gather_rows(NmtModel *m, const Device *dev, const Tensor *src, int64_t n_src,
                        const Tensor *dst, int64_t row_elems, const int32_t *rows, int64_t n) {
  upload(m, &m->beam_rows, rows, n);
  Tensor idx = rows_of(&m->beam_rows, n);
  Tensor table = tfm_view2(src, n_src, row_elems), out = tfm_view2(dst, n, row_elems);
  op_embedding_fwd(dev, &idx, &table, &out);
}

void nmt_model_encode(NmtModel *m, const Device *dev, const WmtBatch *batch, int beam) {
  const NmtShape *s = &m->shape;
  int64_t n = batch->b * beam, dm = s->d_model;
  if (n > s->max_decode_seqs)
    DIE("nmt: %lld hypotheses exceed the decoding buffers (%lld)", (long long)n,
        (long long)s->max_decode_seqs);
  nmt_upload_batch(m, batch);
  if (m->lowp) amp_cast(dev, m->ps.params, m->lowp, s->dtype, m->ps.total_numel);
  int64_t rs = batch->b * batch->s;
  nmt_embed(m, dev, &m->src, &m->src_kept, &m->src_pos, rs, &m->x_src, 1.0f, 0, 0);
  const Tensor *x = &m->x_src;
  for (int i = 0; i < s->enc_layers; i++) {
    TfmPass p = nmt_pass(m, dev, &m->eval_dims, batch->b, batch->s, batch->s, 0, 0);
    Tensor xv = tfm_view2(x, rs, dm);
    tfm_layer_fwd(&m->enc[i], &p, &m->scratch, &xv, NULL);
    x = &m->enc[i].ffn.out;
  }
  final_norm_fwd(m, dev, m->enc_ln, x, &m->enc_out, &m->enc_mean, &m->enc_rstd, rs);
  // Hypothesis i reads source i / beam: the encoder output and the length.
  int32_t *rows = m->host_ids;
  for (int64_t i = 0; i < n; i++) rows[i] = (int32_t)(i / beam);
  gather_rows(m, dev, &m->enc_out, batch->b, &m->mem, batch->s * dm, rows, n);
  for (int64_t i = 0; i < n; i++) rows[n + i] = batch->src_len[i / beam];
  upload(m, &m->src_len, rows + n, n);
  m->dec_seqs = n;
  m->dec_src = batch->s;
  Tensor mem = tfm_view2(&m->mem, n * batch->s, dm);
  for (int i = 0; i < s->dec_layers; i++) {
    TfmPass p = nmt_pass(m, dev, &m->eval_dims, n, 1, batch->s, 0, 0);
    tfm_layer_memory(&m->dec[i], &p, &mem, &m->cache[i]);
  }
}

Tensor nmt_model_decode_step(NmtModel *m, const Device *dev, const int32_t *ids, int64_t t) {
  const NmtShape *s = &m->shape;
  int64_t n = m->dec_seqs, dm = s->d_model;
  if (t >= s->max_len) DIE("nmt: decoding position %lld beyond %lld", (long long)t, (long long)s->max_len);
  upload(m, &m->tgt_in, ids, n);
  upload_kept(m, &m->tgt_kept, ids, n);
  for (int64_t i = 0; i < n; i++) m->host_ids[i] = (int32_t)t;
  upload(m, &m->tgt_pos, m->host_ids, n);
  nmt_embed(m, dev, &m->tgt_in, &m->tgt_kept, &m->tgt_pos, n, &m->x_tgt, 1.0f, 0, 0);
  const Tensor *x = &m->x_tgt;
  for (int i = 0; i < s->dec_layers; i++) {
    TfmPass p = nmt_pass(m, dev, &m->eval_dims, n, 1, m->dec_src, 0, 0);
    Tensor xv = tfm_view2(x, n, dm);
    TfmCache *c = &m->cache[i];
    tfm_layer_step(&m->dec[i], &p, &m->scratch, c, t, &xv);
    Tensor k = c->k[0], v = c->v[0];  // the new cache becomes the current one
    c->k[0] = c->k[1], c->v[0] = c->v[1], c->k[1] = k, c->v[1] = v;
    x = &m->dec[i].ffn.out;
  }
  final_norm_fwd(m, dev, m->dec_ln, x, &m->dec_out, &m->dec_mean, &m->dec_rstd, n);
  Tensor out = tfm_view2(&m->dec_out, n, dm), emb = weight(m, m->emb);
  Tensor logits = tfm_view2(&m->logits, n, s->vocab);
  op_linear_fwd(dev, &out, &emb, NULL, &logits);
  return logits;
}

void nmt_model_reorder(NmtModel *m, const Device *dev, const int32_t *parent, int64_t t) {
  int64_t n = m->dec_seqs, elems = (t + 1) * m->shape.d_model;
  for (int i = 0; i < m->shape.dec_layers; i++) {
    TfmCache *c = &m->cache[i];
    gather_rows(m, dev, &c->k[0], n, &c->k[1], elems, parent, n);
    gather_rows(m, dev, &c->v[0], n, &c->v[1], elems, parent, n);
    Tensor k = c->k[0], v = c->v[0];
    c->k[0] = c->k[1], c->v[0] = c->v[1], c->k[1] = k, c->v[1] = v;
  }
}
