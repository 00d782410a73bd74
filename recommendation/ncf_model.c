// ncf_model.c: NeuMF's parameters, initialisation, forward and backward, all
// through the op library (dispatched to CPU or CUDA by dev->kind).
#include "ncf_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/rng.h"
#include "ops/conv.h"
#include "ops/dense.h"
#include "ops/elementwise.h"
#include "ops/layout.h"
#include "ops/loss.h"
#include "train/amp.h"


void ncf_parse_layers(const char *key, const char *text, NcfShape *shape) {
  shape->n_layers = 0;
  const char *p = text;
  while (*p) {
    char *end;
    long v = strtol(p, &end, 10);
    if (end == p || v < 2 || v > 1 << 16 || (*end && *end != ','))
      die_input(key, "want comma-separated layer widths like 256,256,128,64, got \"%s\"", text);
    if (shape->n_layers == NCF_MAX_LAYERS)
      die_input(key, "at most %d layer widths, got \"%s\"", NCF_MAX_LAYERS, text);
    shape->layers[shape->n_layers++] = v;
    p = *end ? end + 1 : end;
  }
  if (shape->n_layers < 2 || shape->layers[0] % 2)
    die_input(key, "want an even input width and at least one layer after it, got \"%s\"", text);
}

static void ncf_spec(NcfModel *m, int i, const char *name, int64_t rows, int64_t cols,
                     unsigned flags) {
  m->specs[i] = param_spec(m->names[i], sizeof m->names[i], name, rows, cols, flags);
}

static int ncf_build_specs(NcfModel *m) {
  const NcfShape *s = &m->shape;
  ncf_spec(m, NCF_MF_USER, "mf_user", s->n_users, s->mf_dim, PARAM_EMBEDDING);
  ncf_spec(m, NCF_MF_ITEM, "mf_item", s->n_items, s->mf_dim, PARAM_EMBEDDING);
  ncf_spec(m, NCF_MLP_USER, "mlp_user", s->n_users, s->layers[0] / 2, PARAM_EMBEDDING);
  ncf_spec(m, NCF_MLP_ITEM, "mlp_item", s->n_items, s->layers[0] / 2, PARAM_EMBEDDING);
  char name[16];
  for (int k = 1; k < s->n_layers; k++) {
    snprintf(name, sizeof name, "mlp%d_w", k);
    ncf_spec(m, ncf_w(k), name, s->layers[k], s->layers[k - 1], 0);
    snprintf(name, sizeof name, "mlp%d_b", k);
    ncf_spec(m, ncf_w(k) + 1, name, s->layers[k], 0, PARAM_NO_DECAY);
  }
  ncf_spec(m, ncf_final_w(s), "final_w", 1, s->mf_dim + s->layers[s->n_layers - 1], 0);
  ncf_spec(m, ncf_final_w(s) + 1, "final_b", 1, 0, PARAM_NO_DECAY);
  return ncf_final_w(s) + 2;
}

// The reference's initialisation, drawn on the host from (seed, stream i).
static void ncf_init_params(NcfModel *m, uint64_t seed) {
  const ParamSet *ps = &m->ps;
  float *host = xcalloc((size_t)ps->total_numel, sizeof(float));  // (total_numel)
  for (int i = 0; i < ps->count; i++) {
    const ParamSpec *s = &m->specs[i];
    float *p = host + ps->offsets[i];
    int64_t n = ps->numels[i];
    uint64_t stream = 200 + (uint64_t)i;
    if (s->flags & PARAM_EMBEDDING) {
      rng_fill_normal_cpu(p, n, seed, stream, 0, 0.0f, 0.01f);
    } else if (s->ndim == 2) {
      double fan_in = (double)s->shape[1], fan_out = (double)s->shape[0];
      double limit = i == ncf_final_w(&m->shape) ? sqrt(3.0 / fan_in)  // LeCun uniform
                                                  : sqrt(6.0 / (fan_in + fan_out));  // Glorot
      rng_fill_uniform_cpu(p, n, seed, stream, 0, (float)-limit, (float)limit);
    } else {
      // A bias: PyTorch's Linear default, from its weight's fan-in.
      double bound = 1.0 / sqrt((double)m->specs[i - 1].shape[1]);
      rng_fill_uniform_cpu(p, n, seed, stream, 0, (float)-bound, (float)bound);
    }
  }
  device_copy(ps->device, ps->params, DEVICE_CPU, host, (size_t)ps->total_numel * sizeof(float));
  free(host);
}

static Tensor ncf_buffer(NcfModel *m, DType dtype, int64_t cols) {
  int64_t shape[2] = {m->max_rows, cols};
  return arena_tensor(&m->arena, dtype, cols ? 2 : 1, shape);
}

static void ncf_alloc_acts(NcfModel *m) {
  const NcfShape *s = &m->shape;
  int64_t mf = s->mf_dim, in = s->layers[0], last = s->layers[s->n_layers - 1], widest = 0;
  int64_t act_cols = 0;
  for (int k = 1; k < s->n_layers; k++) {
    widest = s->layers[k] > widest ? s->layers[k] : widest;
    act_cols += s->layers[k];
  }
  // Columns of 4 bytes or less each, the low-precision copies included.
  int64_t cols = 3 + 6 * mf + 3 * in + act_cols + 2 * (mf + last) + 2 + 2 * widest + in +
                 (in + 2 * mf + 1);
  arena_init(&m->arena, "ncf activations", m->ps.device,
             (size_t)(m->max_rows * cols) * sizeof(float) + 64 * ARENA_ALIGN_BYTES);
  NcfActs *a = &m->a;
  DType lowp = s->dtype;
  bool copies = lowp != DT_F32;  // separate low-precision buffers
  a->users = ncf_buffer(m, DT_I32, 0);
  a->items = ncf_buffer(m, DT_I32, 0);
  a->labels = ncf_buffer(m, DT_F32, 0);
  a->gmf_u = ncf_buffer(m, DT_F32, mf);
  a->gmf_i = ncf_buffer(m, DT_F32, mf);
  a->gmf = ncf_buffer(m, DT_F32, mf);
  a->gmf_lowp = copies ? ncf_buffer(m, lowp, mf) : a->gmf;
  a->mlp_u = ncf_buffer(m, DT_F32, in / 2);
  a->mlp_i = ncf_buffer(m, DT_F32, in / 2);
  a->mlp_in = ncf_buffer(m, DT_F32, in);
  a->mlp_in_lowp = copies ? ncf_buffer(m, lowp, in) : a->mlp_in;
  for (int k = 1; k < s->n_layers; k++) a->act[k] = ncf_buffer(m, lowp, s->layers[k]);
  a->cat = ncf_buffer(m, lowp, mf + last);
  a->logits = ncf_buffer(m, DT_F32, 1);
  a->loss = arena_tensor(&m->arena, DT_F32, 1, (int64_t[]){1});
  a->dlogits = ncf_buffer(m, DT_F32, 1);
  a->dlogits_lowp = copies ? ncf_buffer(m, lowp, 1) : a->dlogits;
  a->dcat = ncf_buffer(m, lowp, mf + last);
  a->dgmf = ncf_buffer(m, DT_F32, mf);
  a->dgmf_lowp = copies ? ncf_buffer(m, lowp, mf) : a->dgmf;
  a->dgmf_u = ncf_buffer(m, DT_F32, mf);
  a->dgmf_i = ncf_buffer(m, DT_F32, mf);
  a->dact[0] = ncf_buffer(m, lowp, widest);
  a->dact[1] = ncf_buffer(m, lowp, widest);
  a->dmlp_in = ncf_buffer(m, lowp, in);
  a->dmlp_u = ncf_buffer(m, lowp, in / 2);
  a->dmlp_i = ncf_buffer(m, lowp, in / 2);
}

void ncf_model_init(NcfModel *m, const NcfShape *shape, int n_state, int64_t max_rows,
                    uint64_t seed, DeviceKind device) {
  memset(m, 0, sizeof *m);
  if (shape->dtype != DT_F32 && shape->dtype != DT_F16 && shape->dtype != DT_BF16)
    DIE("ncf_model_init: compute dtype %s is not fp32, fp16 or bf16", dtype_name(shape->dtype));
  if (shape->dtype != DT_F32 && device != DEVICE_CUDA)
    DIE("ncf_model_init: %s compute needs a CUDA device; the CPU path computes in fp32",
        dtype_name(shape->dtype));
  m->shape = *shape;
  m->max_rows = max_rows;
  int count = ncf_build_specs(m);
  paramset_init(&m->ps, m->specs, count, n_state, device);
  ncf_init_params(m, seed);
  ncf_alloc_acts(m);
  if (shape->dtype != DT_F32) {
    int64_t n = m->ps.total_numel - m->ps.offsets[NCF_FIRST_LINEAR];
    m->lowp_weights = device_alloc(device, (size_t)n * dtype_size(shape->dtype));
  }
}

void ncf_model_free(NcfModel *m) {
  device_free(m->ps.device, m->lowp_weights);
  arena_free(&m->arena);
  paramset_free(&m->ps);
  memset(m, 0, sizeof *m);
}

// The first rows rows of a (max_rows, ...) buffer; cols > 0 re-views it as
// (rows, cols) (the ping-pong gradient buffers serve several widths).
static Tensor ncf_rows(Tensor t, int64_t rows, int64_t cols) {
  t.shape[0] = rows;
  if (cols) t.shape[1] = cols;
  return t;
}

static bool ncf_lowp(const NcfModel *m) { return m->shape.dtype != DT_F32; }

// Linear weight i as the layers read it: fp32, or its low-precision copy.
static Tensor ncf_weight(const NcfModel *m, int i) {
  if (ncf_lowp(m)) return amp_weight_view(&m->ps, m->lowp_weights, m->shape.dtype, NCF_FIRST_LINEAR, i);
  return paramset_param(&m->ps, i);
}

void ncf_model_forward(NcfModel *m, const Device *dev, int64_t rows) {
  const NcfShape *s = &m->shape;
  const NcfActs *a = &m->a;
  const ParamSet *ps = &m->ps;
  bool lowp = ncf_lowp(m);
  if (lowp) {
    int64_t first = ps->offsets[NCF_FIRST_LINEAR];
    amp_cast(dev, ps->params + first, m->lowp_weights, s->dtype, ps->total_numel - first);
  }
  Tensor users = ncf_rows(a->users, rows, 0), items = ncf_rows(a->items, rows, 0);
  Tensor gmf_u = ncf_rows(a->gmf_u, rows, 0), gmf_i = ncf_rows(a->gmf_i, rows, 0);
  Tensor gmf = ncf_rows(a->gmf, rows, 0);
  Tensor mf_user = paramset_param(ps, NCF_MF_USER), mf_item = paramset_param(ps, NCF_MF_ITEM);
  op_embedding_fwd(dev, &users, &mf_user, &gmf_u);
  op_embedding_fwd(dev, &items, &mf_item, &gmf_i);
  op_mul(dev, &gmf_u, &gmf_i, &gmf);

  Tensor mlp[2] = {ncf_rows(a->mlp_u, rows, 0), ncf_rows(a->mlp_i, rows, 0)};
  Tensor x = ncf_rows(a->mlp_in, rows, 0);
  Tensor mlp_user = paramset_param(ps, NCF_MLP_USER), mlp_item = paramset_param(ps, NCF_MLP_ITEM);
  op_embedding_fwd(dev, &users, &mlp_user, &mlp[0]);
  op_embedding_fwd(dev, &items, &mlp_item, &mlp[1]);
  op_concat(dev, mlp, 2, 1, &x);
  if (lowp) {
    Tensor x_lowp = ncf_rows(a->mlp_in_lowp, rows, 0), gmf_lowp = ncf_rows(a->gmf_lowp, rows, 0);
    op_cast(dev, &x, &x_lowp);
    op_cast(dev, &gmf, &gmf_lowp);
    x = x_lowp;
    gmf = gmf_lowp;
  }
  for (int k = 1; k < s->n_layers; k++) {
    Tensor y = ncf_rows(a->act[k], rows, 0);
    Tensor w = ncf_weight(m, ncf_w(k)), b = paramset_param(ps, ncf_w(k) + 1);
    op_linear_fwd(dev, &x, &w, &b, &y);
    op_relu_fwd(dev, &y, &y);
    x = y;
  }
  Tensor parts[2] = {gmf, x}, cat = ncf_rows(a->cat, rows, 0);
  Tensor logits = ncf_rows(a->logits, rows, 0);
  op_concat(dev, parts, 2, 1, &cat);
  Tensor w = ncf_weight(m, ncf_final_w(s)), b = paramset_param(ps, ncf_final_w(s) + 1);
  op_linear_fwd(dev, &cat, &w, &b, &logits);
}

static void ncf_ready(GradHook hook, int first, int last) {
  if (hook.ready)
    for (int t = last; t >= first; t--) hook.ready(hook.ctx, t);
}

// dtable of embedding param i from dout: overwritten, or added to.
static void ncf_embedding_grad(const NcfModel *m, const Device *dev, int i, const Tensor *idx,
                               const Tensor *dout, bool accumulate, GradHook hook) {
  Tensor g = paramset_grad(&m->ps, i);
  op_embedding_bwd(dev, idx, dout, &g, accumulate);
  ncf_ready(hook, i, i);
}

void ncf_model_backward(NcfModel *m, const Device *dev, int64_t rows, float grad_scale,
                        bool accumulate, GradHook hook) {
  const NcfShape *s = &m->shape;
  const NcfActs *a = &m->a;
  const ParamSet *ps = &m->ps;
  int last = s->n_layers - 1;
  Tensor users = ncf_rows(a->users, rows, 0), items = ncf_rows(a->items, rows, 0);
  Tensor logits = ncf_rows(a->logits, rows, 0), labels = ncf_rows(a->labels, rows, 0);
  Tensor dlogits = ncf_rows(a->dlogits, rows, 0);
  op_bce_logits(dev, &logits, &labels, grad_scale, &a->loss, &dlogits);
  bool lowp = ncf_lowp(m);
  if (lowp) {
    Tensor d = ncf_rows(a->dlogits_lowp, rows, 0);
    op_cast(dev, &dlogits, &d);
    dlogits = d;
  }

  Tensor cat = ncf_rows(a->cat, rows, 0), dcat = ncf_rows(a->dcat, rows, 0);
  Tensor w = ncf_weight(m, ncf_final_w(s));
  Tensor dw = paramset_grad(ps, ncf_final_w(s)), db = paramset_grad(ps, ncf_final_w(s) + 1);
  op_linear_bwd(dev, &cat, &w, &dlogits, &dcat, &dw, &db, accumulate);
  ncf_ready(hook, ncf_final_w(s), ncf_final_w(s) + 1);
  Tensor dparts[2] = {ncf_rows(a->dgmf_lowp, rows, 0),
                      ncf_rows(a->dact[last % 2], rows, s->layers[last])};
  op_split(dev, &dcat, 1, dparts, 2);

  // MLP layers top down; layer k's output gradient is in dact[k % 2].
  for (int k = last; k >= 1; k--) {
    Tensor y = ncf_rows(a->act[k], rows, 0);
    Tensor dy = ncf_rows(a->dact[k % 2], rows, s->layers[k]);
    Tensor x = k > 1 ? ncf_rows(a->act[k - 1], rows, 0) : ncf_rows(a->mlp_in_lowp, rows, 0);
    Tensor dx = k > 1 ? ncf_rows(a->dact[(k - 1) % 2], rows, s->layers[k - 1])
                      : ncf_rows(a->dmlp_in, rows, 0);
    Tensor wk = ncf_weight(m, ncf_w(k));
    Tensor dwk = paramset_grad(ps, ncf_w(k)), dbk = paramset_grad(ps, ncf_w(k) + 1);
    op_relu_bwd(dev, &y, &dy, &dy);
    op_linear_bwd(dev, &x, &wk, &dy, &dx, &dwk, &dbk, accumulate);
    ncf_ready(hook, ncf_w(k), ncf_w(k) + 1);
  }
  Tensor dmlp_in = ncf_rows(a->dmlp_in, rows, 0);
  Tensor dmlp[2] = {ncf_rows(a->dmlp_u, rows, 0), ncf_rows(a->dmlp_i, rows, 0)};
  op_split(dev, &dmlp_in, 1, dmlp, 2);
  ncf_embedding_grad(m, dev, NCF_MLP_ITEM, &items, &dmlp[1], accumulate, hook);
  ncf_embedding_grad(m, dev, NCF_MLP_USER, &users, &dmlp[0], accumulate, hook);

  // GMF: d(u * i) / du = i, / di = u (in fp32).
  Tensor dgmf = ncf_rows(a->dgmf, rows, 0);
  if (lowp) op_cast(dev, &dparts[0], &dgmf);
  Tensor gmf_u = ncf_rows(a->gmf_u, rows, 0), gmf_i = ncf_rows(a->gmf_i, rows, 0);
  Tensor dgmf_u = ncf_rows(a->dgmf_u, rows, 0), dgmf_i = ncf_rows(a->dgmf_i, rows, 0);
  op_mul(dev, &dgmf, &gmf_i, &dgmf_u);
  op_mul(dev, &dgmf, &gmf_u, &dgmf_i);
  ncf_embedding_grad(m, dev, NCF_MF_ITEM, &items, &dgmf_i, accumulate, hook);
  ncf_embedding_grad(m, dev, NCF_MF_USER, &users, &dgmf_u, accumulate, hook);
}
