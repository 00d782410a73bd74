// tensor.c: dtypes, tensors, arenas and parameter sets.
#include "device/tensor.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

static const struct {
  const char *name;
  size_t size;
} kDTypes[] = {
    [DT_F32] = {"fp32", 4}, [DT_F16] = {"fp16", 2}, [DT_BF16] = {"bf16", 2},
    [DT_I32] = {"int32", 4}, [DT_I64] = {"int64", 8}, [DT_U8] = {"uint8", 1},
};
#define N_DTYPES ((int)(sizeof kDTypes / sizeof kDTypes[0]))

size_t dtype_size(DType dtype) { return kDTypes[dtype].size; }
const char *dtype_name(DType dtype) { return kDTypes[dtype].name; }

int dtype_parse(const char *name) {
  for (int i = 0; i < N_DTYPES; i++)
    if (strcmp(name, kDTypes[i].name) == 0) return i;
  return -1;
}

static uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}

static float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}

uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);  // round to nearest, ties to even
  return (uint16_t)(u >> 16);
}

float bf16_to_f32(uint16_t b) { return bits_f32((uint32_t)b << 16); }

uint16_t f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); // rounds to >= 65520: inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): the value is m * 2^-24 with m < 1024, exact
    // in fp32; round m to nearest even by hand.
    float m = bits_f32(abs) * 16777216.0f;
    uint32_t mi = (uint32_t)m;
    float frac = m - (float)mi;
    if (frac > 0.5f || (frac == 0.5f && (mi & 1))) mi++;
    return (uint16_t)(sign | mi);
  }
  // Normal: re-bias the exponent (127 -> 15) and round the 13 dropped bits.
  uint32_t h = ((abs - 0x38000000u) >> 13);
  uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1))) h++;
  return (uint16_t)(sign | h);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = (float)mant / 16777216.0f;  // mant * 2^-24
    return sign ? -v : v;
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

float dtype_load_f32(const void *p, DType dt, int64_t i) {
  switch (dt) {
    case DT_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    case DT_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
  }
}

void dtype_store_f32(void *p, DType dt, int64_t i, float v) {
  switch (dt) {
    case DT_F16: ((uint16_t *)p)[i] = f32_to_f16(v); break;
    case DT_BF16: ((uint16_t *)p)[i] = f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
  }
}

Tensor tensor_make(void *data, DType dtype, DeviceKind device, int ndim,
                   const int64_t *shape) {
  if (ndim < 0 || ndim > TENSOR_MAX_DIMS) DIE("tensor_make: %d dims (max %d)", ndim, TENSOR_MAX_DIMS);
  Tensor t = {.data = data, .dtype = dtype, .device = device, .ndim = ndim};
  for (int i = 0; i < ndim; i++) {
    if (shape[i] < 0) DIE("tensor_make: negative extent %lld", (long long)shape[i]);
    t.shape[i] = shape[i];
  }
  return t;
}

int64_t tensor_numel(const Tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

size_t tensor_bytes(const Tensor *t) { return (size_t)tensor_numel(t) * dtype_size(t->dtype); }

Tensor tensor_rows(const Tensor *t, int64_t first, int64_t count) {
  size_t row_bytes = dtype_size(t->dtype);
  for (int d = 1; d < t->ndim; d++) row_bytes *= (size_t)t->shape[d];
  Tensor v = *t;
  v.data = (uint8_t *)t->data + (size_t)first * row_bytes;
  v.shape[0] = count;
  return v;
}

bool tensor_same_shape(const Tensor *a, const Tensor *b) {
  if (a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

const char *tensor_shape_str(const Tensor *t, char *buf, size_t buf_bytes) {
  size_t n = (size_t)snprintf(buf, buf_bytes, "(");
  for (int i = 0; i < t->ndim && n < buf_bytes; i++)
    n += (size_t)snprintf(buf + n, buf_bytes - n, i ? ", %lld" : "%lld", (long long)t->shape[i]);
  if (n < buf_bytes) snprintf(buf + n, buf_bytes - n, ")");
  return buf;
}

// ------------------------------------------------------------------ arenas

void arena_init(Arena *a, const char *name, DeviceKind device, size_t capacity_bytes) {
  memset(a, 0, sizeof *a);
  a->name = name;
  a->device = device;
  a->capacity_bytes = capacity_bytes;
  a->base = device_alloc(device, capacity_bytes);
}

void arena_init_measuring(Arena *a, const char *name) {
  memset(a, 0, sizeof *a);
  a->name = name;
  a->device = DEVICE_CPU;
  a->capacity_bytes = SIZE_MAX;
}

void arena_free(Arena *a) {
  device_free(a->device, a->base);
  memset(a, 0, sizeof *a);
}

void *arena_alloc(Arena *a, size_t bytes) {
  size_t start = (a->used_bytes + ARENA_ALIGN_BYTES - 1) / ARENA_ALIGN_BYTES * ARENA_ALIGN_BYTES;
  if (bytes > a->capacity_bytes - start) {
    char detail[160];
    snprintf(detail, sizeof detail, "arena '%s': %zu bytes wanted, %zu of %zu free", a->name,
             bytes, a->capacity_bytes - start, a->capacity_bytes);
    check_fail("arena_alloc", detail, __FILE__, __LINE__,
               "the arena is sized at start-up from the model and batch; lower the batch size");
  }
  a->used_bytes = start + bytes;
  if (a->used_bytes > a->peak_bytes) a->peak_bytes = a->used_bytes;
  return a->base ? a->base + start : NULL;  // NULL: a measuring arena
}

Tensor arena_tensor(Arena *a, DType dtype, int ndim, const int64_t *shape) {
  Tensor t = tensor_make(NULL, dtype, a->device, ndim, shape);
  t.data = arena_alloc(a, tensor_bytes(&t));
  return t;
}

size_t arena_mark(const Arena *a) { return a->used_bytes; }

void arena_release(Arena *a, size_t mark) {
  if (mark > a->used_bytes) DIE("arena_release: mark %zu beyond use %zu", mark, a->used_bytes);
  a->used_bytes = mark;
}

// ------------------------------------------------------------ parameter sets

ParamSpec param_spec(char *name_buf, size_t name_cap, const char *name, int64_t rows,
                     int64_t cols, unsigned flags) {
  snprintf(name_buf, name_cap, "%s", name);
  ParamSpec s = {.name = name_buf, .ndim = cols ? 2 : 1, .shape = {rows, cols}, .flags = flags};
  return s;
}

void paramset_init(ParamSet *ps, const ParamSpec *specs, int count, int n_state,
                   DeviceKind device) {
  if (n_state < 0 || n_state > PARAM_MAX_STATE)
    DIE("paramset_init: %d optimizer state buffers (max %d)", n_state, PARAM_MAX_STATE);
  memset(ps, 0, sizeof *ps);
  ps->count = count;
  ps->specs = specs;
  ps->device = device;
  ps->n_state = n_state;
  ps->offsets = xmalloc((size_t)count * sizeof(int64_t));
  ps->numels = xmalloc((size_t)count * sizeof(int64_t));
  int64_t offset = 0;
  for (int i = 0; i < count; i++) {
    const ParamSpec *s = &specs[i];
    if (s->ndim < 1 || s->ndim > PARAM_MAX_DIMS) DIE("param %s: %d dims", s->name, s->ndim);
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->shape[d];
    for (int j = 0; j < i; j++)
      if (strcmp(specs[j].name, s->name) == 0) DIE("param %s: declared twice", s->name);
    ps->offsets[i] = offset;
    ps->numels[i] = n;
    offset += (n + PARAM_ALIGN_ELEMS - 1) / PARAM_ALIGN_ELEMS * PARAM_ALIGN_ELEMS;
  }
  ps->total_numel = offset;
  size_t bytes = (size_t)offset * sizeof(float);
  float **buffers[2 + PARAM_MAX_STATE] = {&ps->params, &ps->grads};
  for (int k = 0; k < n_state; k++) buffers[2 + k] = &ps->state[k];
  for (int k = 0; k < 2 + n_state; k++) {
    *buffers[k] = device_alloc(device, bytes);
    device_zero(device, *buffers[k], bytes);
  }
}

void paramset_free(ParamSet *ps) {
  device_free(ps->device, ps->params);
  device_free(ps->device, ps->grads);
  for (int k = 0; k < ps->n_state; k++) device_free(ps->device, ps->state[k]);
  free(ps->offsets);
  free(ps->numels);
  memset(ps, 0, sizeof *ps);
}

static Tensor param_view(const ParamSet *ps, float *base, int i) {
  if (i < 0 || i >= ps->count) DIE("param index %d out of %d", i, ps->count);
  const ParamSpec *s = &ps->specs[i];
  return tensor_make(base + ps->offsets[i], DT_F32, ps->device, s->ndim, s->shape);
}

Tensor paramset_param(const ParamSet *ps, int i) { return param_view(ps, ps->params, i); }
Tensor paramset_grad(const ParamSet *ps, int i) { return param_view(ps, ps->grads, i); }

int paramset_find(const ParamSet *ps, const char *name) {
  for (int i = 0; i < ps->count; i++)
    if (strcmp(ps->specs[i].name, name) == 0) return i;
  return -1;
}

int64_t paramset_count_params(const ParamSet *ps) {
  int64_t n = 0;
  for (int i = 0; i < ps->count; i++) n += ps->numels[i];
  return n;
}
