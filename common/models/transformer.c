// transformer.c: the transformer layers over the op library (dispatched to
// CPU or CUDA by dev->kind).
#include "models/transformer.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/norm.h"
#include "train/amp.h"

// Dropout streams of a layer, from TfmPass.stream on (TFM_DROP_STREAMS).
enum { DROP_SELF, DROP_CROSS, DROP_RELU, DROP_FFN, DROP_SELF_PROBS, DROP_CROSS_PROBS };
_Static_assert(DROP_CROSS_PROBS + 1 == TFM_DROP_STREAMS, "transformer.h's stream count");

static const char *const kRoleNames[TFM_ROLES] = {
    "ln1_g", "ln1_b", "wq", "wk", "wv", "wo", "lnc_g", "lnc_b", "wqc", "wkc", "wvc", "woc",
    "ln2_g", "ln2_b", "w1", "b1", "w2", "b2", "bq", "bk", "bv", "bo"};

static bool role_in(TfmRole r, bool cross, const TfmDims *d) {
  if (r >= TFM_BQ) return d->proj_bias;
  return cross || r < TFM_LNC_G || r > TFM_WOC;
}

void tfm_layer_specs(ParamSpec *specs, char (*names)[TFM_NAME_BYTES], int *count,
                     const char *prefix, const TfmDims *d, bool cross, int index[TFM_ROLES]) {
  int64_t dm = d->d_model, ff = d->d_ff;
  if (d->post_norm && cross) DIE("transformer: post-norm layers are encoder layers");
  for (int r = 0; r < TFM_ROLES; r++) {
    index[r] = -1;
    if (!role_in((TfmRole)r, cross, d)) continue;
    int i = (*count)++;
    index[r] = i;
    char name[TFM_NAME_BYTES];
    snprintf(name, sizeof name, "%s.%s", prefix, kRoleNames[r]);
    bool vector = r == TFM_LN1_G || r == TFM_LN1_B || r == TFM_LNC_G || r == TFM_LNC_B ||
                  r == TFM_LN2_G || r == TFM_LN2_B || r == TFM_B1 || r == TFM_B2 || r >= TFM_BQ;
    int64_t rows = r == TFM_W1 || r == TFM_B1 ? ff : dm;
    int64_t cols = vector ? 0 : r == TFM_W2 ? ff : dm;
    specs[i] = param_spec(names[i], TFM_NAME_BYTES, name, rows, cols, vector ? PARAM_NO_DECAY : 0);
  }
}

void tfm_layer_init(float *host_params, const ParamSet *ps, const int index[TFM_ROLES],
                    uint64_t seed, uint64_t first_stream) {
  for (int r = 0; r < TFM_ROLES; r++) {
    int i = index[r];
    if (i < 0) continue;
    float *p = host_params + ps->offsets[i];
    int64_t n = ps->numels[i];
    const ParamSpec *s = &ps->specs[i];
    if (s->ndim == 2) {
      double limit = sqrt(6.0 / (double)(s->shape[0] + s->shape[1]));  // Glorot uniform
      rng_fill_uniform_cpu(p, n, seed, first_stream + (uint64_t)r, 0, (float)-limit,
                           (float)limit);
    } else {
      float v = r == TFM_LN1_G || r == TFM_LNC_G || r == TFM_LN2_G ? 1.0f : 0.0f;
      for (int64_t j = 0; j < n; j++) p[j] = v;
    }
  }
}

bool tfm_fused_attention(bool wanted, DeviceKind device, DType dtype, int64_t d_model,
                         int64_t heads) {
  return wanted && device == DEVICE_CUDA && heads > 0 &&
         op_attention_fused_supported(device, dtype, d_model / heads);
}

// ---------------------------------------------------------------- buffers

static Tensor buf2(Arena *a, DType dt, int64_t rows, int64_t cols) {
  return arena_tensor(a, dt, 2, (int64_t[]){rows, cols});
}

static void attn_alloc(TfmAttnActs *a, Arena *arena, const TfmDims *d, int64_t rows,
                       int64_t key_rows, int64_t max_probs) {
  a->h = buf2(arena, d->dtype, rows, d->d_model);
  a->mean = arena_tensor(arena, DT_F32, 1, (int64_t[]){rows});
  a->rstd = arena_tensor(arena, DT_F32, 1, (int64_t[]){rows});
  a->q = buf2(arena, d->dtype, rows, d->d_model);
  a->k = buf2(arena, d->dtype, key_rows, d->d_model);
  a->v = buf2(arena, d->dtype, key_rows, d->d_model);
  a->att = buf2(arena, d->dtype, rows, d->d_model);
  if (d->fused_attention)
    a->lse = arena_tensor(arena, DT_F32, 1, (int64_t[]){d->heads * rows});
  else
    a->probs = arena_tensor(arena, d->dtype, 1, (int64_t[]){max_probs});
  a->out = buf2(arena, d->dtype, rows, d->d_model);
}

void tfm_layer_alloc(TfmLayer *l, Arena *arena, const TfmDims *d, int64_t max_rows,
                     int64_t max_key_rows, int64_t max_probs) {
  attn_alloc(&l->self, arena, d, max_rows, max_rows, max_probs);
  if (l->cross) attn_alloc(&l->xattn, arena, d, max_rows, max_key_rows, max_probs);
  TfmFfnActs *f = &l->ffn;
  f->h = buf2(arena, d->dtype, max_rows, d->d_model);
  f->mean = arena_tensor(arena, DT_F32, 1, (int64_t[]){max_rows});
  f->rstd = arena_tensor(arena, DT_F32, 1, (int64_t[]){max_rows});
  f->f = buf2(arena, d->dtype, max_rows, d->d_ff);
  f->fd = d->keep_prob < 1.0f || d->gelu ? buf2(arena, d->dtype, max_rows, d->d_ff) : f->f;
  f->out = buf2(arena, d->dtype, max_rows, d->d_model);
}

void tfm_scratch_alloc(TfmScratch *s, Arena *arena, const TfmDims *d, int64_t max_rows,
                       int64_t grad_rows, int64_t max_probs) {
  s->tmp = buf2(arena, d->dtype, max_rows, d->d_model);
  Tensor *grads[] = {&s->dh, &s->dq, &s->dk, &s->dv, &s->datt, &s->dtmp};
  for (size_t i = 0; i < sizeof grads / sizeof grads[0]; i++)
    *grads[i] = buf2(arena, d->dtype, grad_rows, d->d_model);
  s->df = buf2(arena, d->dtype, grad_rows, d->d_ff);
  if (d->fused_attention)
    s->delta = arena_tensor(arena, DT_F32, 1, (int64_t[]){d->heads * grad_rows});
  else
    s->attn = arena_tensor(arena, d->dtype, 1, (int64_t[]){max_probs});
}

void tfm_cache_alloc(TfmCache *c, Arena *arena, const TfmDims *d, int64_t max_seqs,
                     int64_t max_len, int64_t max_src) {
  for (int i = 0; i < 2; i++) {
    c->k[i] = buf2(arena, d->dtype, max_seqs * max_len, d->d_model);
    c->v[i] = buf2(arena, d->dtype, max_seqs * max_len, d->d_model);
  }
  c->mem_k = buf2(arena, d->dtype, max_seqs * max_src, d->d_model);
  c->mem_v = buf2(arena, d->dtype, max_seqs * max_src, d->d_model);
}

// ---------------------------------------------------------------- views

static Tensor view(const Tensor *t, int ndim, const int64_t *shape) {
  Tensor v = *t;
  v.ndim = ndim;
  memcpy(v.shape, shape, (size_t)ndim * sizeof(int64_t));
  if (tensor_numel(&v) > tensor_numel(t))
    DIE("transformer: a view of %lld elements on a buffer of %lld", (long long)tensor_numel(&v),
        (long long)tensor_numel(t));
  return v;
}

Tensor tfm_view2(const Tensor *t, int64_t rows, int64_t cols) {
  return view(t, 2, (int64_t[]){rows, cols});
}

// (B, T, H, Dh): the head view attention reads.
static Tensor heads(const Tensor *t, const TfmDims *d, int64_t b, int64_t len) {
  return view(t, 4, (int64_t[]){b, len, d->heads, d->d_model / d->heads});
}

static Tensor vec(const Tensor *t, int64_t n) { return view(t, 1, (int64_t[]){n}); }

Tensor tfm_weight(const TfmWeights *w, const TfmLayer *l, TfmRole role) {
  int i = l->p[role];
  if (i < 0) DIE("transformer: the layer has no %s", kRoleNames[role]);
  bool matrix = w->ps->specs[i].ndim == 2;
  if (w->lowp && matrix) return amp_weight_view(w->ps, w->lowp, w->dtype, 0, i);
  return paramset_param(w->ps, i);
}

static Tensor param(const TfmWeights *w, const TfmLayer *l, TfmRole role) {
  return paramset_param(w->ps, l->p[role]);
}

static Tensor grad(const TfmWeights *w, const TfmLayer *l, TfmRole role) {
  return paramset_grad(w->ps, l->p[role]);
}

// A bias (fp32, as the ops take it) or its gradient, into *t; NULL when the
// layer has none.
static const Tensor *opt_param(const TfmWeights *w, const TfmLayer *l, TfmRole role, Tensor *t) {
  if (l->p[role] < 0) return NULL;
  *t = param(w, l, role);
  return t;
}
static const Tensor *opt_grad(const TfmWeights *w, const TfmLayer *l, TfmRole role, Tensor *t) {
  if (l->p[role] < 0) return NULL;
  *t = grad(w, l, role);
  return t;
}

// ---------------------------------------------------------------- forward

// out = x + dropout(y) (y is overwritten by the dropout).
static void residual_fwd(const TfmPass *p, const Tensor *x, const Tensor *y, const Tensor *out,
                         int site) {
  if (p->keep_prob < 1.0f)
    op_dropout_fwd(p->dev, y, y, p->keep_prob, p->seed, p->stream + (uint64_t)site);
  op_add(p->dev, x, y, out);
}

// The gradient of y in out = x + dropout(y), from dout: dout itself when
// there is no dropout, else into scratch.
static Tensor residual_bwd(const TfmPass *p, const Tensor *dout, const Tensor *scratch,
                           int site) {
  if (p->keep_prob >= 1.0f) return *dout;
  Tensor dy = tfm_view2(scratch, dout->shape[0], dout->shape[1]);
  op_dropout_bwd(p->dev, dout, &dy, p->keep_prob, p->seed, p->stream + (uint64_t)site);
  return dy;
}

static void layernorm_fwd(const TfmPass *p, const TfmLayer *l, TfmRole gamma, const Tensor *x,
                          const Tensor *h, const Tensor *mean, const Tensor *rstd) {
  Tensor g = param(p->w, l, gamma), b = param(p->w, l, (TfmRole)(gamma + 1));
  op_layernorm_fwd(p->dev, x, &g, &b, p->d->ln_eps, h, mean, rstd);
}

// A sub-layer's end from its input x and its f(x) in y: out = x +
// dropout(y) (pre-norm), or (post-norm) sum = x + dropout(y) and out = its
// layer norm (gamma's role), in one op.
static void sublayer_end(const TfmPass *p, const TfmLayer *l, TfmRole gamma, const Tensor *x,
                         const Tensor *y, int site, const Tensor *sum, const Tensor *out,
                         const Tensor *mean, const Tensor *rstd) {
  if (!p->d->post_norm) {
    residual_fwd(p, x, y, out, site);
    return;
  }
  Tensor g = param(p->w, l, gamma), b = param(p->w, l, (TfmRole)(gamma + 1));
  op_residual_layernorm_fwd(p->dev, x, y, p->keep_prob < 1.0f ? p->keep_prob : 1.0f, p->seed,
                            p->stream + (uint64_t)site, &g, &b, p->d->ln_eps, sum, out, mean, rstd);
}

// Views of a sub-layer's buffers for this batch: b t query rows, b tk key
// rows (keys and values only with_kv: a decoding step reads them from its
// cache instead).
typedef struct AttnViews {
  Tensor h, mean, rstd, q, k, v, att, probs, lse, out;  // probs or lse: unfused or fused
} AttnViews;

static AttnViews attn_views(const TfmAttnActs *a, const TfmDims *d, int64_t b, int64_t t,
                            int64_t tk, bool with_kv) {
  int64_t r = b * t, rk = b * tk, dm = d->d_model;
  AttnViews v = {
      .h = tfm_view2(&a->h, r, dm), .mean = vec(&a->mean, r), .rstd = vec(&a->rstd, r),
      .q = tfm_view2(&a->q, r, dm), .att = tfm_view2(&a->att, r, dm),
      .out = tfm_view2(&a->out, r, dm)};
  if (d->fused_attention)
    v.lse = view(&a->lse, 3, (int64_t[]){b, d->heads, t});
  else
    v.probs = view(&a->probs, 4, (int64_t[]){b, d->heads, t, tk});
  if (with_kv) v.k = tfm_view2(&a->k, rk, dm), v.v = tfm_view2(&a->v, rk, dm);
  return v;
}

// The dropout on a sub-layer's attention probabilities.
static AttnDropout probs_dropout(const TfmPass *p, bool cross) {
  return (AttnDropout){p->attn_keep_prob, p->seed,
                       p->stream + (uint64_t)(cross ? DROP_CROSS_PROBS : DROP_SELF_PROBS)};
}

// The biases of the self-attention projections (none for cross-attention).
typedef struct ProjBias {
  Tensor t[4];
  const Tensor *q, *k, *v, *o;
} ProjBias;

static void proj_bias(ProjBias *b, const TfmWeights *w, const TfmLayer *l, bool cross, bool grads) {
  const Tensor *(*get)(const TfmWeights *, const TfmLayer *, TfmRole, Tensor *) =
      grads ? opt_grad : opt_param;
  b->q = cross ? NULL : get(w, l, TFM_BQ, &b->t[0]);
  b->k = cross ? NULL : get(w, l, TFM_BK, &b->t[1]);
  b->v = cross ? NULL : get(w, l, TFM_BV, &b->t[2]);
  b->o = cross ? NULL : get(w, l, TFM_BO, &b->t[3]);
}

// Sub-layer  f(x) = attention(in Wq, src Wk, src Wv) Wo,  in = LN(x) (pre-
// norm) or x (post-norm), src = mem for cross-attention, in for self-
// attention; a->out = x + dropout(f(x)), or LN of it (post-norm). key_len
// masks keys; causal: position i sees keys up to i.
static void attn_fwd(const TfmLayer *l, const TfmAttnActs *a, const TfmPass *p,
                     const TfmScratch *s, const Tensor *x, const Tensor *mem, bool causal) {
  const TfmDims *d = p->d;
  bool cross = mem != NULL;
  int64_t tk = cross ? p->tk : p->t;
  TfmRole base = cross ? TFM_LNC_G : TFM_LN1_G;
  AttnViews v = attn_views(a, d, p->b, p->t, tk, true);
  const Tensor *in = x;
  if (!d->post_norm) layernorm_fwd(p, l, base, x, &v.h, &v.mean, &v.rstd), in = &v.h;
  const Tensor *src = cross ? mem : in;
  Tensor wq = tfm_weight(p->w, l, (TfmRole)(base + 2)), wk = tfm_weight(p->w, l, (TfmRole)(base + 3));
  Tensor wv = tfm_weight(p->w, l, (TfmRole)(base + 4)), wo = tfm_weight(p->w, l, (TfmRole)(base + 5));
  ProjBias bias;
  proj_bias(&bias, p->w, l, cross, false);
  op_linear_fwd(p->dev, in, &wq, bias.q, &v.q);
  op_linear_fwd(p->dev, src, &wk, bias.k, &v.k);
  op_linear_fwd(p->dev, src, &wv, bias.v, &v.v);
  Tensor q4 = heads(&v.q, d, p->b, p->t), k4 = heads(&v.k, d, p->b, tk);
  Tensor v4 = heads(&v.v, d, p->b, tk), att4 = heads(&v.att, d, p->b, p->t);
  Tensor key_len = vec(p->key_len, p->b);  // the batch's part of the lengths buffer
  AttnDropout drop = probs_dropout(p, cross);
  if (d->fused_attention) {
    op_attention_fused_fwd(p->dev, &q4, &k4, &v4, causal ? NULL : &key_len, causal, &drop, &v.lse,
                           &att4);
  } else {
    Tensor dropped = view(&s->attn, 4, v.probs.shape);
    op_attention_fwd(p->dev, &q4, &k4, &v4, causal ? NULL : &key_len, causal, &drop, &v.probs,
                     &dropped, &att4);
  }
  Tensor o = tfm_view2(&s->tmp, p->b * p->t, d->d_model);
  op_linear_fwd(p->dev, &v.att, &wo, bias.o, &o);
  sublayer_end(p, l, base, x, &o, cross ? DROP_CROSS : DROP_SELF, &v.h, &v.out, &v.mean, &v.rstd);
}

static void ffn_fwd(const TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x) {
  const TfmDims *d = p->d;
  const TfmFfnActs *a = &l->ffn;
  int64_t r = p->b * p->t;
  Tensor h = tfm_view2(&a->h, r, d->d_model), mean = vec(&a->mean, r), rstd = vec(&a->rstd, r);
  Tensor f = tfm_view2(&a->f, r, d->d_ff), out = tfm_view2(&a->out, r, d->d_model);
  const Tensor *in = x;
  if (!d->post_norm) layernorm_fwd(p, l, TFM_LN2_G, x, &h, &mean, &rstd), in = &h;
  Tensor w1 = tfm_weight(p->w, l, TFM_W1), b1 = param(p->w, l, TFM_B1);
  Tensor w2 = tfm_weight(p->w, l, TFM_W2), b2 = param(p->w, l, TFM_B2);
  op_linear_fwd(p->dev, in, &w1, &b1, &f);
  // fd: the activation after dropout (ReLU in place in f, GELU from f;
  // GELU and the dropout in one op).
  bool drop = p->keep_prob < 1.0f;
  Tensor fd = d->gelu || drop ? tfm_view2(&a->fd, r, d->d_ff) : f;
  if (d->gelu && drop) {
    op_gelu_dropout_fwd(p->dev, &f, &fd, p->keep_prob, p->seed, p->stream + DROP_RELU);
  } else if (d->gelu) {
    op_gelu_fwd(p->dev, &f, &fd);
  } else {
    op_relu_fwd(p->dev, &f, &f);
    if (drop) op_dropout_fwd(p->dev, &f, &fd, p->keep_prob, p->seed, p->stream + DROP_RELU);
  }
  Tensor y = tfm_view2(&s->tmp, r, d->d_model);
  op_linear_fwd(p->dev, &fd, &w2, &b2, &y);
  sublayer_end(p, l, TFM_LN2_G, x, &y, DROP_FFN, &h, &out, &mean, &rstd);
}

void tfm_layer_fwd(TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x,
                   const Tensor *mem) {
  if ((p->keep_prob < 1.0f || p->d->gelu) && l->ffn.fd.data == l->ffn.f.data)
    DIE("transformer: a layer allocated without dropout or GELU buffers uses them");
  attn_fwd(l, &l->self, p, s, x, NULL, l->cross);
  Tensor h = tfm_view2(&l->self.out, p->b * p->t, p->d->d_model);
  if (l->cross) {
    attn_fwd(l, &l->xattn, p, s, &h, mem, false);
    h = tfm_view2(&l->xattn.out, p->b * p->t, p->d->d_model);
  }
  ffn_fwd(l, p, s, &h);
}

// ---------------------------------------------------------------- backward

// dx += LN backward of dh (the layer norm of x with gamma's role).
static void layernorm_bwd(const TfmPass *p, const TfmLayer *l, TfmRole gamma, const Tensor *x,
                          const Tensor *mean, const Tensor *rstd, const Tensor *dh,
                          const Tensor *dtmp, const Tensor *dx) {
  Tensor g = param(p->w, l, gamma);
  Tensor dg = grad(p->w, l, gamma), db = grad(p->w, l, (TfmRole)(gamma + 1));
  Tensor dln = tfm_view2(dtmp, dx->shape[0], dx->shape[1]);
  op_layernorm_bwd(p->dev, x, &g, mean, rstd, dh, &dln, &dg, &db, true);
  op_add(p->dev, dx, &dln, dx);
}

// dacc += the input gradient of y = x W + b.
// On CUDA the product adds into dacc itself (beta 1: no pass over a
// temporary). The CPU computes it into dtmp and adds, keeping the order its
// sums always had (OpenBLAS's beta-1 product adds each block of the inner
// dimension onto dacc in turn, which rounds differently).
static void linear_bwd_add(const TfmPass *p, const Tensor *x, const Tensor *w, const Tensor *dy,
                           const Tensor *dw, const Tensor *db, const Tensor *dtmp,
                           const Tensor *dacc) {
  if (p->dev->kind == DEVICE_CUDA) {
    op_linear_bwd(p->dev, x, w, dy, NULL, dw, db, true);
    op_gemm(p->dev, dy, false, w, false, dacc, 1.0f, 1.0f);
    return;
  }
  Tensor dx = tfm_view2(dtmp, dacc->shape[0], dacc->shape[1]);
  op_linear_bwd(p->dev, x, w, dy, &dx, dw, db, true);
  op_add(p->dev, dacc, &dx, dacc);
}

// Post-norm: the gradient of the sum a layer norm read (sum, its statistics
// mean and rstd), from that of its output dout, into dsum.
static void postnorm_bwd(const TfmPass *p, const TfmLayer *l, TfmRole gamma, const Tensor *sum,
                         const Tensor *mean, const Tensor *rstd, const Tensor *dout,
                         const Tensor *dsum) {
  Tensor g = param(p->w, l, gamma);
  Tensor dg = grad(p->w, l, gamma), db = grad(p->w, l, (TfmRole)(gamma + 1));
  op_layernorm_bwd(p->dev, sum, &g, mean, rstd, dout, dsum, &dg, &db, true);
}

static void attn_bwd(const TfmLayer *l, const TfmAttnActs *a, const TfmPass *p,
                     const TfmScratch *s, const Tensor *x, const Tensor *mem, const Tensor *dx,
                     const Tensor *dmem) {
  const TfmDims *d = p->d;
  bool cross = mem != NULL;
  int64_t tk = cross ? p->tk : p->t, r = p->b * p->t, rk = p->b * tk, dm = d->d_model;
  TfmRole base = cross ? TFM_LNC_G : TFM_LN1_G;
  TfmRole rq = (TfmRole)(base + 2), rk_ = (TfmRole)(base + 3), rv = (TfmRole)(base + 4),
          ro = (TfmRole)(base + 5);
  AttnViews v = attn_views(a, d, p->b, p->t, tk, true);
  Tensor dq = tfm_view2(&s->dq, r, dm), dk = tfm_view2(&s->dk, rk, dm);
  Tensor dv = tfm_view2(&s->dv, rk, dm), datt = tfm_view2(&s->datt, r, dm);
  Tensor dh = tfm_view2(&s->dh, r, dm);
  Tensor wq = tfm_weight(p->w, l, rq), wk = tfm_weight(p->w, l, rk_);
  Tensor wv = tfm_weight(p->w, l, rv), wo = tfm_weight(p->w, l, ro);
  Tensor gq = grad(p->w, l, rq), gk = grad(p->w, l, rk_), gv = grad(p->w, l, rv);
  Tensor go = grad(p->w, l, ro);
  ProjBias gb;
  proj_bias(&gb, p->w, l, cross, true);

  // Post-norm: dh holds the gradient of the sum x + dropout(f(x)) (v.h), of
  // which dx is the residual's share; pre-norm: dx is the sum's gradient.
  if (d->post_norm) postnorm_bwd(p, l, base, &v.h, &v.mean, &v.rstd, dx, &dh);
  Tensor dout = residual_bwd(p, d->post_norm ? &dh : dx, &s->dtmp, cross ? DROP_CROSS : DROP_SELF);
  op_linear_bwd(p->dev, &v.att, &wo, &dout, &datt, &go, gb.o, true);
  Tensor q4 = heads(&v.q, d, p->b, p->t), k4 = heads(&v.k, d, p->b, tk);
  Tensor v4 = heads(&v.v, d, p->b, tk), datt4 = heads(&datt, d, p->b, p->t);
  Tensor dq4 = heads(&dq, d, p->b, p->t), dk4 = heads(&dk, d, p->b, tk);
  Tensor dv4 = heads(&dv, d, p->b, tk);
  AttnDropout drop = probs_dropout(p, cross);
  if (d->fused_attention) {
    // The forward's masks: causal self-attention in decoder layers, key_len elsewhere.
    bool causal = !cross && l->cross;
    Tensor key_len = vec(p->key_len, p->b), att4 = heads(&v.att, d, p->b, p->t);
    Tensor delta = view(&s->delta, 3, v.lse.shape);
    op_attention_fused_bwd(p->dev, &q4, &k4, &v4, causal ? NULL : &key_len, causal, &drop, &att4,
                           &v.lse, &datt4, &delta, &dq4, &dk4, &dv4);
  } else {
    Tensor scratch = view(&s->attn, 4, v.probs.shape);
    op_attention_bwd(p->dev, &q4, &k4, &v4, &v.probs, &drop, &datt4, &scratch, &dq4, &dk4, &dv4);
  }
  if (d->post_norm) {  // the projections read x: dx = dh + their input gradients
    op_linear_bwd(p->dev, x, &wq, &dq, dx, &gq, gb.q, true);
    linear_bwd_add(p, x, &wk, &dk, &gk, gb.k, &s->dtmp, dx);
    linear_bwd_add(p, x, &wv, &dv, &gv, gb.v, &s->dtmp, dx);
    op_add(p->dev, dx, &dh, dx);
    return;
  }
  op_linear_bwd(p->dev, &v.h, &wq, &dq, &dh, &gq, gb.q, true);
  if (cross) {
    linear_bwd_add(p, mem, &wk, &dk, &gk, NULL, &s->dtmp, dmem);
    linear_bwd_add(p, mem, &wv, &dv, &gv, NULL, &s->dtmp, dmem);
  } else {
    linear_bwd_add(p, &v.h, &wk, &dk, &gk, gb.k, &s->dtmp, &dh);
    linear_bwd_add(p, &v.h, &wv, &dv, &gv, gb.v, &s->dtmp, &dh);
  }
  layernorm_bwd(p, l, base, x, &v.mean, &v.rstd, &dh, &s->dtmp, dx);
}

static void ffn_bwd(const TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x,
                    const Tensor *dx) {
  const TfmDims *d = p->d;
  const TfmFfnActs *a = &l->ffn;
  int64_t r = p->b * p->t;
  Tensor h = tfm_view2(&a->h, r, d->d_model), mean = vec(&a->mean, r), rstd = vec(&a->rstd, r);
  Tensor f = tfm_view2(&a->f, r, d->d_ff);
  Tensor fd = p->keep_prob < 1.0f || d->gelu ? tfm_view2(&a->fd, r, d->d_ff) : f;
  Tensor df = tfm_view2(&s->df, r, d->d_ff), dh = tfm_view2(&s->dh, r, d->d_model);
  Tensor w1 = tfm_weight(p->w, l, TFM_W1), w2 = tfm_weight(p->w, l, TFM_W2);
  Tensor g1 = grad(p->w, l, TFM_W1), gb1 = grad(p->w, l, TFM_B1);
  Tensor g2 = grad(p->w, l, TFM_W2), gb2 = grad(p->w, l, TFM_B2);

  // As in attn_bwd: post-norm's sum gradient in dh.
  if (d->post_norm) postnorm_bwd(p, l, TFM_LN2_G, &h, &mean, &rstd, dx, &dh);
  Tensor dy = residual_bwd(p, d->post_norm ? &dh : dx, &s->dtmp, DROP_FFN);
  op_linear_bwd(p->dev, &fd, &w2, &dy, &df, &g2, &gb2, true);
  if (d->gelu && p->keep_prob < 1.0f) {
    op_gelu_dropout_bwd(p->dev, &f, &df, &df, p->keep_prob, p->seed, p->stream + DROP_RELU);
  } else {
    if (p->keep_prob < 1.0f)
      op_dropout_bwd(p->dev, &df, &df, p->keep_prob, p->seed, p->stream + DROP_RELU);
    if (d->gelu)
      op_gelu_bwd(p->dev, &f, &df, &df);
    else
      op_relu_bwd(p->dev, &f, &df, &df);
  }
  if (d->post_norm) {
    op_linear_bwd(p->dev, x, &w1, &df, dx, &g1, &gb1, true);
    op_add(p->dev, dx, &dh, dx);
    return;
  }
  op_linear_bwd(p->dev, &h, &w1, &df, &dh, &g1, &gb1, true);
  layernorm_bwd(p, l, TFM_LN2_G, x, &mean, &rstd, &dh, &s->dtmp, dx);
}

void tfm_layer_bwd(const TfmLayer *l, const TfmPass *p, const TfmScratch *s, const Tensor *x,
                   const Tensor *mem, const Tensor *dx, const Tensor *dmem) {
  int64_t r = p->b * p->t, dm = p->d->d_model;
  Tensor self_out = tfm_view2(&l->self.out, r, dm);
  if (l->cross) {
    Tensor xattn_out = tfm_view2(&l->xattn.out, r, dm);
    ffn_bwd(l, p, s, &xattn_out, dx);
    attn_bwd(l, &l->xattn, p, s, &self_out, mem, dx, dmem);
  } else {
    ffn_bwd(l, p, s, &self_out, dx);
  }
  attn_bwd(l, &l->self, p, s, x, NULL, dx, NULL);
}

// ---------------------------------------------------------------- decoding

void tfm_layer_memory(const TfmLayer *l, const TfmPass *p, const Tensor *mem, TfmCache *c) {
  int64_t rk = p->b * p->tk, dm = p->d->d_model;
  Tensor wk = tfm_weight(p->w, l, TFM_WKC), wv = tfm_weight(p->w, l, TFM_WVC);
  Tensor k = tfm_view2(&c->mem_k, rk, dm), v = tfm_view2(&c->mem_v, rk, dm);
  op_linear_fwd(p->dev, mem, &wk, NULL, &k);
  op_linear_fwd(p->dev, mem, &wv, NULL, &v);
}

// cache[1] (B, t + 1, D) = cache[0] (B, t, D) with row (B, 1, D) appended.
static void cache_append(const TfmPass *p, const Tensor cache[2], const Tensor *row, int64_t t) {
  int64_t dm = p->d->d_model;
  Tensor next = view(&cache[1], 3, (int64_t[]){p->b, t + 1, dm});
  Tensor parts[2] = {view(&cache[0], 3, (int64_t[]){p->b, t, dm}),
                     view(row, 3, (int64_t[]){p->b, 1, dm})};
  // The first position has no cache before it: a one-part concatenation copies the row.
  op_concat(p->dev, t == 0 ? &parts[1] : parts, t == 0 ? 1 : 2, 1, &next);
}

// One position of self- or cross-attention against keys/values k, v
// (B, len, D) (mask: key_len, or none).
static void attn_step(const TfmLayer *l, const TfmAttnActs *a, const TfmPass *p,
                      const TfmScratch *s, const Tensor *x, TfmRole base, const Tensor *k,
                      const Tensor *v, int64_t len, const Tensor *key_len, int site) {
  const TfmDims *d = p->d;
  AttnViews w = attn_views(a, d, p->b, 1, len, false);
  Tensor wq = tfm_weight(p->w, l, (TfmRole)(base + 2)), wo = tfm_weight(p->w, l, (TfmRole)(base + 5));
  op_linear_fwd(p->dev, &w.h, &wq, NULL, &w.q);
  Tensor q4 = heads(&w.q, d, p->b, 1), k4 = heads(k, d, p->b, len), v4 = heads(v, d, p->b, len);
  Tensor att4 = heads(&w.att, d, p->b, 1);
  Tensor lens = key_len ? vec(key_len, p->b) : (Tensor){0};
  if (d->fused_attention)
    op_attention_fused_fwd(p->dev, &q4, &k4, &v4, key_len ? &lens : NULL, false, NULL, &w.lse,
                           &att4);
  else
    op_attention_fwd(p->dev, &q4, &k4, &v4, key_len ? &lens : NULL, false, NULL, &w.probs, NULL,
                     &att4);
  Tensor o = tfm_view2(&s->tmp, p->b, d->d_model);
  op_linear_fwd(p->dev, &w.att, &wo, NULL, &o);
  residual_fwd(p, x, &o, &w.out, site);
}

void tfm_layer_step(TfmLayer *l, const TfmPass *p, const TfmScratch *s, TfmCache *c,
                    int64_t t, const Tensor *x) {
  const TfmDims *d = p->d;
  if (!l->cross) DIE("transformer: a decoding step needs a decoder layer");
  if (p->keep_prob < 1.0f || p->attn_keep_prob < 1.0f)
    DIE("transformer: decoding runs without dropout");
  if (d->post_norm || d->proj_bias) DIE("transformer: decoding steps are pre-norm, without biases");
  TfmPass one = *p;
  one.t = 1;
  int64_t dm = d->d_model;
  // Self-attention: this position's key and value join the cache.
  AttnViews w = attn_views(&l->self, d, p->b, 1, t + 1, false);
  layernorm_fwd(&one, l, TFM_LN1_G, x, &w.h, &w.mean, &w.rstd);
  Tensor wk = tfm_weight(p->w, l, TFM_WK), wv = tfm_weight(p->w, l, TFM_WV);
  Tensor k_new = tfm_view2(&s->dk, p->b, dm), v_new = tfm_view2(&s->dv, p->b, dm);
  op_linear_fwd(p->dev, &w.h, &wk, NULL, &k_new);
  op_linear_fwd(p->dev, &w.h, &wv, NULL, &v_new);
  cache_append(&one, c->k, &k_new, t);
  cache_append(&one, c->v, &v_new, t);
  attn_step(l, &l->self, &one, s, x, TFM_LN1_G, &c->k[1], &c->v[1], t + 1, NULL, DROP_SELF);
  // Cross-attention over the encoder output's keys and values.
  Tensor h = tfm_view2(&l->self.out, p->b, dm);
  AttnViews xw = attn_views(&l->xattn, d, p->b, 1, p->tk, false);
  layernorm_fwd(&one, l, TFM_LNC_G, &h, &xw.h, &xw.mean, &xw.rstd);
  attn_step(l, &l->xattn, &one, s, &h, TFM_LNC_G, &c->mem_k, &c->mem_v, p->tk, p->key_len,
            DROP_CROSS);
  Tensor h2 = tfm_view2(&l->xattn.out, p->b, dm);
  ffn_fwd(l, &one, s, &h2);
}
