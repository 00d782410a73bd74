// conv_dnnl.c: CPU convolutions through oneDNN (see conv_dnnl.h). The
// activations stay NHWC ("nhwc"), which oneDNN's kernels read as they are;
// the filters (KRSC, "ohwi") are reordered into the layout the kernel picks
// (with KRSC itself it offers only its slow reference loops). oneDNN picks
// its kernels for the CPU it runs on (AVX-512, AVX2, AVX, SSE4.1); scratch is
// the caller's, one per thread.
#include "ops/conv_dnnl.h"

#include "core/check.h"

static bool g_use_library = true;
static int64_t g_runs;

bool op_conv2d_cpu_library(bool use) {
  bool was = g_use_library;
  g_use_library = use;
  return was;
}

int64_t op_conv2d_cpu_library_runs(void) {
  int64_t runs;
#pragma omp atomic read
  runs = g_runs;
  return runs;
}

#if HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

struct ConvDnnl {
  ConvDnnlKind kind;
  int64_t key[16];  // kind, images, geometry, parameters, bias
  dnnl_primitive_t prim;
  dnnl_memory_desc_t x, y, b;  // activations in and out (NHWC), bias
  dnnl_memory_desc_t w_user;   // filters as the op library keeps them (KRSC)
  dnnl_memory_desc_t w;        // filters as the kernel wants them
  dnnl_primitive_t reorder;    // w_user -> w, or (BWD_FILTER) w -> w_user
  dnnl_memory_desc_t scratch;
  size_t scratch_bytes, w_bytes;
};

// The primitives made so far, one per shape; a process meets a few dozen.
static ConvDnnl *g_cache;
static int g_cached, g_capacity;
static dnnl_engine_t g_engine;

#define DNNL_OK(call) dnnl_ok((call), #call)
static bool dnnl_ok(dnnl_status_t s, const char *what) {
  if (s != dnnl_success && s != dnnl_unimplemented)
    DIE("oneDNN: %s failed (status %d)", what, (int)s);
  return s == dnnl_success;
}

static void md_tag(dnnl_memory_desc_t *md, int ndims, const dnnl_dims_t dims,
                   dnnl_format_tag_t tag) {
  DNNL_OK(dnnl_memory_desc_init_by_tag(md, ndims, dims, dnnl_f32, tag));
}

// Runs a primitive on the calling thread, oneDNN told it has one thread
// (conv_dnnl.h): mds[i] describes ptr[i], passed as args[i].
static void dnnl_run(dnnl_primitive_t prim, int n, const int *args,
                     const dnnl_memory_desc_t *const *mds, void *const *ptr) {
  dnnl_exec_arg_t exec[6];
  dnnl_memory_t mem[6];
  for (int i = 0; i < n; i++) {
    DNNL_OK(dnnl_memory_create(&mem[i], mds[i], g_engine, ptr[i]));
    exec[i] = (dnnl_exec_arg_t){args[i], mem[i]};
  }
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  dnnl_stream_t stream;
  DNNL_OK(dnnl_stream_create(&stream, g_engine, dnnl_stream_default_flags));
  DNNL_OK(dnnl_primitive_execute(prim, stream, n, exec));
  DNNL_OK(dnnl_stream_wait(stream));
  dnnl_stream_destroy(stream);
  omp_set_num_threads(threads);
  for (int i = 0; i < n; i++) dnnl_memory_destroy(mem[i]);
}

// Whether oneDNN's kernel `impl` is one this file refuses for the case:
// - its reference loops ("ref..."), slower than im2col + OpenBLAS by far;
// - the filter gradient of a strided 1x1 convolution with fewer than 8 input
//   channels by the 1x1 kernels ("jit_1x1:avx2" in oneDNN 2.6, on CPUs
//   without AVX-512 or capped below it): its unit-stride copy of the input
//   in the scratch is sized for C channels a pixel and filled for 8, so it
//   writes past the scratch it asked for (56 to 728 bytes on 12x12 images
//   at C 1 to 7; conv.c's guard bytes stop such a run).
static bool conv_dnnl_refused(const char *impl, ConvDnnlKind kind, const ConvGeometry *g,
                              const ConvParams *p) {
  if (!impl || strncmp(impl, "ref", 3) == 0) return true;
  bool strided_1x1 = g->r == 1 && g->s == 1 && (p->stride_h > 1 || p->stride_w > 1);
  return kind == CONV_DNNL_BWD_FILTER && strided_1x1 && g->c < 8 &&
         strncmp(impl, "jit_1x1", 7) == 0;
}

// The primitive's description, or NULL where oneDNN has nothing for it or
// only a kernel refused above.
static dnnl_primitive_desc_t conv_dnnl_pd(const_dnnl_op_desc_t d, dnnl_primitive_attr_t attr,
                                          const_dnnl_primitive_desc_t hint, ConvDnnlKind kind,
                                          const ConvGeometry *g, const ConvParams *p) {
  dnnl_primitive_desc_t pd;
  if (!DNNL_OK(dnnl_primitive_desc_create(&pd, d, attr, g_engine, hint))) return NULL;
  const char *impl = NULL;
  DNNL_OK(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl));
  if (conv_dnnl_refused(impl, kind, g, p)) {
    dnnl_primitive_desc_destroy(pd);
    return NULL;
  }
  return pd;
}

// Makes the primitive and its filter reorder, with oneDNN told it has one
// thread. False where oneDNN has no fast kernel for this case.
static bool conv_dnnl_make(ConvDnnl *c, const ConvGeometry *g, const ConvParams *p,
                           int64_t images, bool bias) {
  dnnl_dims_t xd = {images, g->c, g->h, g->w}, yd = {images, g->k, g->p, g->q},
              wd = {g->k, g->c, g->r, g->s}, bd = {g->k};
  dnnl_memory_desc_t w_any;
  md_tag(&c->x, 4, xd, dnnl_nhwc);
  md_tag(&c->y, 4, yd, dnnl_nhwc);
  md_tag(&c->w_user, 4, wd, dnnl_ohwi);
  md_tag(&w_any, 4, wd, dnnl_format_tag_any);  // the kernel's choice
  md_tag(&c->b, 1, bd, dnnl_a);
  // oneDNN counts dilation from 0 and wants the padding at the far end that
  // makes its output extent ours: conv_out_extent rounds down, so the last
  // rows of the input may go unread (a negative right padding).
  dnnl_dims_t strides = {p->stride_h, p->stride_w}, dil = {p->dil_h - 1, p->dil_w - 1},
              pad_l = {p->pad_h, p->pad_w},
              pad_r = {(g->p - 1) * p->stride_h + (g->r - 1) * p->dil_h + 1 - g->h - p->pad_h,
                       (g->q - 1) * p->stride_w + (g->s - 1) * p->dil_w + 1 - g->w - p->pad_w};
  dnnl_convolution_desc_t fwd_d, d;
  bool with_bias = bias && c->kind == CONV_DNNL_FWD;
  if (!DNNL_OK(dnnl_dilated_convolution_forward_desc_init(
          &fwd_d, dnnl_forward_training, dnnl_convolution_direct, &c->x, &w_any,
          with_bias ? &c->b : NULL, &c->y, strides, dil, pad_l, pad_r)))
    return false;
  if (c->kind == CONV_DNNL_BWD_DATA &&
      !DNNL_OK(dnnl_dilated_convolution_backward_data_desc_init(
          &d, dnnl_convolution_direct, &c->x, &w_any, &c->y, strides, dil, pad_l, pad_r)))
    return false;
  if (c->kind == CONV_DNNL_BWD_FILTER &&
      !DNNL_OK(dnnl_dilated_convolution_backward_weights_desc_init(
          &d, dnnl_convolution_direct, &c->x, &w_any, NULL, &c->y, strides, dil, pad_l, pad_r)))
    return false;
  dnnl_primitive_attr_t attr;
  DNNL_OK(dnnl_primitive_attr_create(&attr));
  DNNL_OK(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user));
  dnnl_primitive_desc_t fwd_pd = conv_dnnl_pd(&fwd_d, attr, NULL, CONV_DNNL_FWD, g, p), pd = NULL,
                        re_pd = NULL;
  if (fwd_pd && c->kind == CONV_DNNL_FWD)
    pd = fwd_pd, fwd_pd = NULL;
  else if (fwd_pd)
    pd = conv_dnnl_pd(&d, attr, fwd_pd, c->kind, g, p);
  if (pd) {
    dnnl_query_t wq = c->kind == CONV_DNNL_BWD_FILTER ? dnnl_query_diff_weights_md
                                                      : dnnl_query_weights_md;
    c->w = *dnnl_primitive_desc_query_md(pd, wq, 0);
    c->w_bytes = dnnl_memory_desc_get_size(&c->w);
    c->scratch = *dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    c->scratch_bytes = dnnl_memory_desc_get_size(&c->scratch);
    bool to_user = c->kind == CONV_DNNL_BWD_FILTER;
    if (DNNL_OK(dnnl_reorder_primitive_desc_create(&re_pd, to_user ? &c->w : &c->w_user, g_engine,
                                                   to_user ? &c->w_user : &c->w, g_engine, NULL))) {
      DNNL_OK(dnnl_primitive_create(&c->prim, pd));
      DNNL_OK(dnnl_primitive_create(&c->reorder, re_pd));
      dnnl_primitive_desc_destroy(re_pd);
    }
  }
  if (pd) dnnl_primitive_desc_destroy(pd);
  if (fwd_pd) dnnl_primitive_desc_destroy(fwd_pd);
  dnnl_primitive_attr_destroy(attr);
  return c->prim != NULL;
}

const ConvDnnl *conv_dnnl_get(ConvDnnlKind kind, const ConvGeometry *g, const ConvParams *p,
                              int64_t images, bool bias) {
  if (!g_use_library || images < 1) return NULL;
  int64_t key[16] = {kind, images, g->h, g->w, g->c, g->k, g->r, g->s, p->stride_h, p->stride_w,
                     p->pad_h, p->pad_w, p->dil_h, p->dil_w, bias};
  for (int i = 0; i < g_cached; i++)
    if (memcmp(g_cache[i].key, key, sizeof key) == 0) return g_cache[i].prim ? &g_cache[i] : NULL;
  int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  if (!g_engine) DNNL_OK(dnnl_engine_create(&g_engine, dnnl_cpu, 0));
  if (g_cached == g_capacity) {
    g_capacity = g_capacity ? 2 * g_capacity : 32;
    g_cache = xrealloc(g_cache, (size_t)g_capacity * sizeof *g_cache);
  }
  ConvDnnl *c = &g_cache[g_cached++];
  *c = (ConvDnnl){.kind = kind};
  memcpy(c->key, key, sizeof key);
  conv_dnnl_make(c, g, p, images, bias);  // a NULL primitive is remembered too: plain path
  omp_set_num_threads(threads);
  return c->prim ? c : NULL;
}

size_t conv_dnnl_scratch_bytes(const ConvDnnl *c) { return c->scratch_bytes; }
size_t conv_dnnl_filter_bytes(const ConvDnnl *c) { return c->w_bytes; }

bool conv_dnnl_same_filter_layout(const ConvDnnl *a, const ConvDnnl *b) {
  return dnnl_memory_desc_equal(&a->w, &b->w) != 0;
}

void conv_dnnl_filter(const ConvDnnl *c, const float *from, float *to) {
  bool to_user = c->kind == CONV_DNNL_BWD_FILTER;
  const dnnl_memory_desc_t *mds[2] = {to_user ? &c->w : &c->w_user, to_user ? &c->w_user : &c->w};
  int args[2] = {DNNL_ARG_FROM, DNNL_ARG_TO};
  void *ptr[2] = {(void *)from, to};
  dnnl_run(c->reorder, 2, args, mds, ptr);
}

void conv_dnnl_run(const ConvDnnl *c, const float *in, const float *other, const float *bias,
                   float *out, void *scratch) {
  const dnnl_memory_desc_t *mds[5];
  int args[5];
  void *ptr[5] = {(void *)in, (void *)other, out, scratch, (void *)bias};
  switch (c->kind) {
    case CONV_DNNL_FWD:
      mds[0] = &c->x, mds[1] = &c->w, mds[2] = &c->y;
      args[0] = DNNL_ARG_SRC, args[1] = DNNL_ARG_WEIGHTS, args[2] = DNNL_ARG_DST;
      break;
    case CONV_DNNL_BWD_DATA:
      mds[0] = &c->y, mds[1] = &c->w, mds[2] = &c->x;
      args[0] = DNNL_ARG_DIFF_DST, args[1] = DNNL_ARG_WEIGHTS, args[2] = DNNL_ARG_DIFF_SRC;
      break;
    default:  // CONV_DNNL_BWD_FILTER
      mds[0] = &c->x, mds[1] = &c->y, mds[2] = &c->w;
      args[0] = DNNL_ARG_SRC, args[1] = DNNL_ARG_DIFF_DST, args[2] = DNNL_ARG_DIFF_WEIGHTS;
      break;
  }
  mds[3] = &c->scratch, args[3] = DNNL_ARG_SCRATCHPAD;
  mds[4] = &c->b, args[4] = DNNL_ARG_BIAS;
  int n = c->kind == CONV_DNNL_FWD && bias ? 5 : 4;
  dnnl_run(c->prim, n, args, mds, ptr);
#pragma omp atomic
  g_runs++;
}

#else  // !HAVE_DNNL

const ConvDnnl *conv_dnnl_get(ConvDnnlKind kind, const ConvGeometry *g, const ConvParams *p,
                              int64_t images, bool bias) {
  (void)kind, (void)g, (void)p, (void)images, (void)bias;
  return NULL;
}
size_t conv_dnnl_scratch_bytes(const ConvDnnl *c) { (void)c; return 0; }
size_t conv_dnnl_filter_bytes(const ConvDnnl *c) { (void)c; return 0; }
bool conv_dnnl_same_filter_layout(const ConvDnnl *a, const ConvDnnl *b) { (void)a, (void)b; return true; }
void conv_dnnl_filter(const ConvDnnl *c, const float *from, float *to) {
  (void)c, (void)from, (void)to;
  DIE("conv_dnnl_filter: built without oneDNN");
}
void conv_dnnl_run(const ConvDnnl *c, const float *in, const float *other, const float *bias,
                   float *out, void *scratch) {
  (void)c, (void)in, (void)other, (void)bias, (void)out, (void)scratch;
  DIE("conv_dnnl_run: built without oneDNN");
}

#endif
