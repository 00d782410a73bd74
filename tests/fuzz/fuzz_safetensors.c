// fuzz_safetensors: the safetensors reader (safetensors.c: the BERT
// fine-tune's pretrained model.safetensors, a file from the internet) on
// any file: the header parsed and the tensor table built
// (safetensors_open), every tensor looked up by its name
// (safetensors_find) and, when it is a float one, read as fp32 with its own
// shape (safetensors_read_f32); then the whole load of a small BERT
// (bert_model_load_safetensors: names with and without "bert.", gamma and
// beta, shapes that must match the model's). A tensor found by name must be
// one of that name, and an accepted file's tensors must lie in its data.
#include <stdlib.h>
#include <string.h>

#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "language/bert_model.h"
#include "train/safetensors.h"

typedef struct Case {
  const char *path;
  BertModel *model;
  SafeTensors st;
} Case;

static void read_all(void *ctx) {
  Case *c = ctx;
  safetensors_open(&c->st, c->path);
  for (int i = 0; i < c->st.count; i++) {
    const StTensor *t = &c->st.tensors[i], *found = safetensors_find(&c->st, t->name);
    if (!found || strcmp(found->name, t->name) != 0) fuzz_fail("tensor %s is not found by its name", t->name);
    if (t->begin > t->end || t->end > c->st.data_bytes)
      fuzz_fail("tensor %s: bytes %llu..%llu of %llu", t->name, (unsigned long long)t->begin,
                (unsigned long long)t->end, (unsigned long long)c->st.data_bytes);
    if (t->dtype == ST_OTHER) continue;
    float *out = malloc((size_t)safetensors_numel(t) * sizeof(float) + 1);
    safetensors_read_f32(&c->st, t->name, t->ndim, t->shape, out);
    free(out);
  }
  safetensors_close(&c->st);
}

static void load_model(void *ctx) {
  Case *c = ctx;
  bert_model_load_safetensors(c->model, c->path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static BertModel model;
  if (!model.ps.count) {
    BertShape shape = fuzz_bert_shape();
    bert_model_init(&model, &shape, 0, 1, DEVICE_CPU);
  }
  Case c = {.path = fuzz_temp_path("model.safetensors"), .model = &model};
  fuzz_write_file(c.path, data, size);
  if (fuzz_call(read_all, &c, FUZZ_RELEASE_LEFTOVERS) == 0) fuzz_call(load_model, &c, FUZZ_RELEASE_LEFTOVERS);
  return 0;
}
