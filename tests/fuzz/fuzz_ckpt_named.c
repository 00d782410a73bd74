// fuzz_ckpt_named: the warm-start reader (ckpt_read_named, ckpt.c: SSD's
// ResNet-34 backbone from a trainer's checkpoint or a torchvision state
// dict converted by datasets/torch_to_ckpt.py) on any file, for part of
// the small model of fuzz_inputs.h: its first three parameter tensors
// (the "backbone", without the classifier) and its batch-norm buffers,
// taken by name from a checkpoint that may hold more and in another order.
// Each input is read as it is and with its CRC-32 fixed (fuzz_as_is_and_crc_fixed).
#include <stdlib.h>

#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "train/ckpt.h"

typedef struct Case {
  const char *path;
  Device *dev;
  ParamSet *params, *buffers;
} Case;

static void read_named(void *ctx) {
  const Case *c = ctx;
  ckpt_read_named(c->path, c->dev, (CkptTensors){c->params, 0, FUZZ_CKPT_N_PARAMS - 1},
                  (CkptTensors){c->buffers, 0, FUZZ_CKPT_N_BUFFERS});
}

static void read_file(const uint8_t *bytes, size_t n_bytes) {
  static Device dev;
  static ParamSet params, buffers;
  if (!params.count) {
    device_open(&dev, DEVICE_CPU, 0);
    paramset_init(&params, kFuzzCkptParams, FUZZ_CKPT_N_PARAMS, 0, DEVICE_CPU);
    paramset_init(&buffers, kFuzzCkptBuffers, FUZZ_CKPT_N_BUFFERS, 0, DEVICE_CPU);
  }
  Case c = {fuzz_temp_path("backbone.ckpt"), &dev, &params, &buffers};
  fuzz_write_file(c.path, bytes, n_bytes);
  fuzz_call(read_named, &c, FUZZ_RELEASE_LEFTOVERS);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_as_is_and_crc_fixed(data, size, read_file);
  return 0;
}
