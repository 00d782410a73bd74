// fuzz_lmdb_record: the read path of one record of an LMDB data set
// (lmdb_store.c, record.c, classify_data.c). The input is written as record 0
// of a fresh data set, which is opened read-only as a trainer opens it; the
// value comes back through lmdb_txn_get (unaligned, as LMDB stores it) into
// record_parse (half the inputs with a valid checksum: fuzz_record_value),
// and then goes where a trainer sends its kind: an image+label
// record's image through classify_augment_image (eval, 32 pixels), boxes and
// token sequences through their accessors. The classification loader's own
// worker is not used: a worker's fatal error ends the process by design
// (loader.c). LMDB's page format is not fuzzed (README.md).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/lmdb_store.h"
#include "data/record.h"
#include "fuzz_util.h"
#include "image_classification/classify_data.h"

enum { kSide = 32 };

typedef struct Case {
  const char *dir;
  LmdbReader *reader;
  LmdbTxn *txn;
} Case;

static ImageDecoder *g_decoder;
static ClassifyScratch g_scratch;

static void use_image(const Record *r, const char *name) {
  ClassifyAugment a = classify_augment_imagenet(false, 1);
  a.out_side = kSide;
  a.resize_side = kSide * 8 / 7;
  uint8_t pixels[kSide * kSide * 3];  // (kSide, kSide, 3)
  classify_augment_image(g_decoder, &g_scratch, &a, r->image, r->image_bytes, name, 0, 0, pixels);
}

static void read_record(void *ctx) {
  Case *c = ctx;
  c->reader = lmdb_reader_open(c->dir);
  c->txn = lmdb_txn_begin(c->reader);
  char name[1200];
  lmdb_record_name(c->dir, 0, name, sizeof name);
  size_t value_bytes;
  const void *value = lmdb_txn_get(c->txn, 0, &value_bytes);
  Record r;
  record_parse(value, value_bytes, name, &r);
  if (r.kind == RECORD_IMAGE_LABEL)
    use_image(&r, name);
  else
    fuzz_read_record_fields(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static char dir[1024];
  if (!g_decoder) {
    g_decoder = image_decoder_create();
    snprintf(dir, sizeof dir, "%s", fuzz_temp_path("lmdb"));
  }
  fuzz_temp_clear();
  void *block;
  const uint8_t *value = fuzz_record_value(data, size, &block);
  LmdbWriter *w = lmdb_writer_open(dir);
  lmdb_writer_put(w, value, size);
  lmdb_writer_close(w);
  free(block);
  Case c = {.dir = dir};
  fuzz_call(read_record, &c, FUZZ_KEEP_LEFTOVERS);
  if (c.txn) lmdb_txn_end(c.txn);
  if (c.reader) lmdb_reader_close(c.reader);
  return 0;
}
