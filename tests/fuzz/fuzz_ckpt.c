// fuzz_ckpt: the checkpoint reader (ckpt_read, ckpt.c) on any file, for the
// small model of fuzz_inputs.h (parameters, Adam's state, batch-norm
// buffers), then the check a resume makes of the run config the file keeps
// (config_check_snapshot). Each input is read twice: as it is, and with its
// last four bytes replaced by the CRC-32 of the rest, so that mutated files
// also get past the checksum to the checks after it. What the reader accepts
// must survive a round trip: the state written again, read and written once
// more gives the same bytes.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/file.h"
#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "train/ckpt.h"

typedef struct Model {
  Device dev;
  ParamSet params, buffers;
  Config config;
} Model;

typedef struct Case {
  Model *model;
  const char *path;      // the input, as a file
  const char *again[2];  // the round trip
} Case;

// Reads `from` into the model and writes what it read to `to`.
static void read_then_write(Model *m, const char *from, const char *to, CkptMeta *meta) {
  ckpt_read(from, &m->dev, &m->params, &m->buffers, meta);
  ckpt_write(to, &m->dev, &m->params, &m->buffers, meta);
}

static void read_input(void *ctx) {
  const Case *c = ctx;
  CkptMeta meta;
  read_then_write(c->model, c->path, c->again[0], &meta);
  char err[600];
  (void)config_check_snapshot(&c->model->config, meta.run_config, NULL, c->path, err, sizeof err);
}

static void read_again(void *ctx) {
  const Case *c = ctx;
  CkptMeta meta;
  read_then_write(c->model, c->again[0], c->again[1], &meta);
  size_t n[2];
  uint8_t *first = file_read(c->again[0], &n[0]), *second = file_read(c->again[1], &n[1]);
  if (n[0] != n[1] || memcmp(first, second, n[0]) != 0)
    fuzz_fail("an accepted checkpoint written back (%zu bytes) reads back as another (%zu bytes)",
              n[0], n[1]);
  free(first);
  free(second);
}

static Model *model(void) {
  static Model m;
  static bool ready;
  if (!ready) {
    device_open(&m.dev, DEVICE_CPU, 0);
    paramset_init(&m.params, kFuzzCkptParams, FUZZ_CKPT_N_PARAMS, FUZZ_CKPT_N_STATE, DEVICE_CPU);
    paramset_init(&m.buffers, kFuzzCkptBuffers, FUZZ_CKPT_N_BUFFERS, 0, DEVICE_CPU);
    fuzz_trainer_config(&m.config);
    ready = true;
  }
  return &m;
}

static void read_file(const uint8_t *bytes, size_t n_bytes) {
  static Case c;
  if (!c.model) {
    c.model = model();
    c.path = fuzz_temp_path("fuzz.ckpt");
    c.again[0] = fuzz_temp_path("again0.ckpt");
    c.again[1] = fuzz_temp_path("again1.ckpt");
  }
  fuzz_write_file(c.path, bytes, n_bytes);
  if (fuzz_call(read_input, &c, FUZZ_RELEASE_LEFTOVERS) == 0 &&
      fuzz_call(read_again, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
    fuzz_fail("the reader refuses what it wrote back: %s", fuzz_last_error());
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_as_is_and_crc_fixed(data, size, read_file);
  return 0;
}
