// safetensors.h: reading checkpoints in the safetensors format (the format
// Hugging Face model files ship as `model.safetensors`): an 8-byte
// little-endian header length N, N bytes of JSON mapping each tensor's name
// to {"dtype", "shape", "data_offsets": [begin, end]} (offsets into the data
// after the header; an optional "__metadata__" entry of strings), then the
// data, row-major, little-endian.
//
// Every problem with a file is a one-line error naming it (and the tensor):
// a short or unreadable file, a header that is not such JSON, offsets
// outside the data or not matching the shape, a tensor asked for that is
// missing or has another shape.
#pragma once
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MAX_DIMS 8

typedef enum { ST_F32, ST_F16, ST_BF16, ST_OTHER } StDType;

typedef struct StTensor {
  char *name;
  StDType dtype;
  char dtype_name[16];  // as the file writes it ("F32", "I64", ...)
  int ndim;
  int64_t shape[ST_MAX_DIMS];
  uint64_t begin, end;  // byte range in the data section
} StTensor;

typedef struct SafeTensors {
  char path[4096];
  FILE *f;
  uint64_t data_start, data_bytes;
  StTensor *tensors;
  int count;
} SafeTensors;

// Opens and indexes the file (the data is read only when asked for).
void safetensors_open(SafeTensors *st, const char *path);
void safetensors_close(SafeTensors *st);
// The tensor called name, or NULL.
const StTensor *safetensors_find(const SafeTensors *st, const char *name);
int64_t safetensors_numel(const StTensor *t);
// Reads tensor name, which must exist with exactly this shape and a float
// dtype (F32, F16 or BF16), into out as fp32.
void safetensors_read_f32(const SafeTensors *st, const char *name, int ndim,
                          const int64_t *shape, float *out);

#ifdef __cplusplus
}
#endif
