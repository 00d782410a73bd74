// fuzz_record: the record decoder (record.c) on any bytes, as an LMDB value.
// The value is copied to an odd address first, as LMDB hands out values
// without alignment, so a cast where an accessor belongs shows as a UBSan
// misaligned load; half the inputs get a valid checksum (fuzz_record_value). A record that decodes is read through its accessors and
// encoded again, which must give back the bytes it was decoded from.
#include <stdlib.h>
#include <string.h>

#include "data/record.h"
#include "fuzz_util.h"

typedef struct Case {
  const uint8_t *value;
  size_t value_bytes;
} Case;

static void parse(void *ctx) {
  const Case *c = ctx;
  Record r;
  record_parse(c->value, c->value_bytes, "fuzz record", &r);
  fuzz_read_record_fields(&r);
  size_t bytes = record_encoded_bytes(&r);
  if (bytes > c->value_bytes)
    fuzz_fail("a %zu-byte value decoded into a record of %zu bytes", c->value_bytes, bytes);
  uint8_t *again = malloc(bytes);
  size_t written = record_encode(&r, again, bytes);
  if (written != bytes || memcmp(again, c->value, bytes) != 0)
    fuzz_fail("decode then encode changed the %s record (%zu bytes)", record_kind_name(r.kind),
              bytes);
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  void *block;
  Case c = {fuzz_record_value(data, size, &block), size};
  fuzz_call(parse, &c, FUZZ_RELEASE_LEFTOVERS);
  free(block);
  return 0;
}
