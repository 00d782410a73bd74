// tensor.h: dtypes, tensors (dtype + shape + pointer), arenas, and the
// parameter table that carves parameters, gradients and optimizer state out
// of contiguous buffers.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device/device.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DT_F32, DT_F16, DT_BF16, DT_I32, DT_I64, DT_U8 } DType;

size_t dtype_size(DType dtype);
const char *dtype_name(DType dtype);
// "fp32" | "fp16" | "bf16" | "int32" | "int64" | "uint8"; -1 when unknown.
int dtype_parse(const char *name);

// CPU conversions, round to nearest even (what the GPU's __float2half_rn and
// __float2bfloat16_rn do), so that CPU and GPU casts agree bit for bit.
uint16_t f32_to_f16(float x);
float f16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float x);
float bf16_to_f32(uint16_t b);
// Element i of a float buffer of dtype dt (fp32, fp16 or bf16) read as fp32,
// and written from fp32 with the rounding above.
float dtype_load_f32(const void *p, DType dt, int64_t i);
void dtype_store_f32(void *p, DType dt, int64_t i, float v);

#define TENSOR_MAX_DIMS 6

typedef struct Tensor {
  void *data;
  DType dtype;
  DeviceKind device;
  int ndim;
  int64_t shape[TENSOR_MAX_DIMS];
} Tensor;

Tensor tensor_make(void *data, DType dtype, DeviceKind device, int ndim,
                   const int64_t *shape);
// TENSOR(ptr, DT_F32, DEVICE_CPU, B, C, H, W)
#define TENSOR(data, dtype, device, ...)                                        \
  tensor_make((data), (dtype), (device),                                      \
              (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)),        \
              (int64_t[]){__VA_ARGS__})
int64_t tensor_numel(const Tensor *t);
// Rows [first, first + count) of t's leading axis, as a view of the same
// memory (a batch's first n images, one micro-batch of a batch).
Tensor tensor_rows(const Tensor *t, int64_t first, int64_t count);
size_t tensor_bytes(const Tensor *t);
bool tensor_same_shape(const Tensor *a, const Tensor *b);
// "(2, 3, 4)" into buf; returns buf.
const char *tensor_shape_str(const Tensor *t, char *buf, size_t buf_bytes);

// An arena is one allocation, handed out front to back; nothing is freed
// singly. Trainers size their activation and workspace arenas once at start,
// so no step allocates.
typedef struct Arena {
  DeviceKind device;
  uint8_t *base;
  size_t capacity_bytes;
  size_t used_bytes;
  size_t peak_bytes;
  const char *name;  // in the out-of-memory message
} Arena;

#define ARENA_ALIGN_BYTES 256

void arena_init(Arena *a, const char *name, DeviceKind device, size_t capacity_bytes);
// An arena that only counts: its allocations are NULL and unlimited, and
// peak_bytes afterwards is the capacity the same carving needs (a model
// carves its buffers twice, measuring, then for real).
void arena_init_measuring(Arena *a, const char *name);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t bytes);
Tensor arena_tensor(Arena *a, DType dtype, int ndim, const int64_t *shape);
size_t arena_mark(const Arena *a);
void arena_release(Arena *a, size_t mark);

// Parameter table: a model declares one row per parameter tensor.
enum {
  PARAM_NO_DECAY = 1u << 0,  // no weight decay and no LARS adaptation (biases, BN)
  PARAM_EMBEDDING = 1u << 1, // rows are looked up; sparse-style gradient
};

#define PARAM_MAX_DIMS 4
#define PARAM_MAX_STATE 3
// Each tensor starts at a multiple of this many elements, for vector loads.
#define PARAM_ALIGN_ELEMS 64

typedef struct ParamSpec {
  const char *name;
  int ndim;
  int64_t shape[PARAM_MAX_DIMS];
  unsigned flags;
} ParamSpec;

typedef struct ParamSet {
  int count;
  const ParamSpec *specs;  // the model's table, not copied
  int64_t *offsets;        // (count) element offset of each tensor
  int64_t *numels;         // (count)
  int64_t total_numel;     // padded length of every flat buffer
  DeviceKind device;
  float *params;                   // (total_numel) fp32 master weights
  float *grads;                    // (total_numel)
  float *state[PARAM_MAX_STATE];   // (total_numel) each: optimizer state
  int n_state;
} ParamSet;

// Allocates params, grads and n_state state buffers, all zeroed.
// The spec of a (rows) vector (cols 0) or (rows, cols) matrix called name;
// the name is copied into name_buf (name_cap bytes), which the spec points at.
ParamSpec param_spec(char *name_buf, size_t name_cap, const char *name, int64_t rows,
                     int64_t cols, unsigned flags);
void paramset_init(ParamSet *ps, const ParamSpec *specs, int count, int n_state,
                   DeviceKind device);
void paramset_free(ParamSet *ps);
Tensor paramset_param(const ParamSet *ps, int i);
Tensor paramset_grad(const ParamSet *ps, int i);
// Index of the named tensor; -1 when absent.
int paramset_find(const ParamSet *ps, const char *name);
// Number of real (unpadded) parameters.
int64_t paramset_count_params(const ParamSet *ps);

// Told each parameter tensor's index as soon as a backward pass has made its
// gradient final, so that its all-reduce can start while the backward goes
// on (dist_grad_hook in dist.h makes one). ready may be NULL: no one listens.
typedef struct GradHook {
  void (*ready)(void *ctx, int tensor);
  void *ctx;
} GradHook;

#ifdef __cplusplus
}
#endif
