// record.c: encoding and decoding of the versioned record layout (record.h).
#include "data/record.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <xxhash.h>

#include "core/check.h"

// Values are stored in host order; every supported host is little-endian.
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "record layout is little-endian");

static const char kMagic[4] = {'M', 'L', 'R', 'C'};
enum { kSealedBytes = 8, kHeaderBytes = 16 };  // the checksum covers bytes from 0, but 8..16

// The checksum of a value of at least kHeaderBytes: the fields after it,
// seeded with the magic, version, kind and format before it.
static uint64_t checksum(const uint8_t *value, size_t value_bytes) {
  uint64_t seed;
  memcpy(&seed, value, kSealedBytes);
  return XXH3_64bits_withSeed(value + kHeaderBytes, value_bytes - kHeaderBytes, seed);
}

void record_seal(void *value, size_t value_bytes) {
  if (value_bytes < kHeaderBytes) DIE("record_seal: %zu bytes, less than a header", value_bytes);
  uint64_t sum = checksum(value, value_bytes);
  memcpy((uint8_t *)value + kSealedBytes, &sum, 8);
}

const char *record_kind_name(RecordKind kind) {
  switch (kind) {
    case RECORD_IMAGE_LABEL: return "image+label";
    case RECORD_IMAGE_BOXES: return "image+boxes";
    case RECORD_TOKENS: return "tokens";
  }
  return "unknown";
}

const char *image_format_name(ImageFormat format) {
  switch (format) {
    case IMAGE_FORMAT_JPEG: return "JPEG";
    case IMAGE_FORMAT_PNG: return "PNG";
    case IMAGE_FORMAT_NONE: break;
  }
  return "none";
}

static size_t payload_bytes(const Record *r) {
  switch (r->kind) {
    case RECORD_IMAGE_LABEL:
      return 4 + 4 + r->image_bytes;
    case RECORD_IMAGE_BOXES:
      return 8 + 4 + (size_t)r->box_count * 20 + 4 + r->image_bytes;
    case RECORD_TOKENS: {
      size_t bytes = 4 + 4 * (size_t)r->seq_count;
      for (int32_t s = 0; s < r->seq_count; s++) bytes += 4 * (size_t)r->seq_len[s];
      return bytes;
    }
  }
  DIE("record kind %d is not one of record.h's", (int)r->kind);
}

size_t record_encoded_bytes(const Record *r) { return kHeaderBytes + payload_bytes(r); }

// A cursor over the bytes of one value, for writing or reading.
typedef struct Cursor {
  uint8_t *out;
  const uint8_t *in;
  size_t pos, end;
} Cursor;

static void put(Cursor *c, const void *src, size_t bytes) {
  if (bytes) memcpy(c->out + c->pos, src, bytes);
  c->pos += bytes;
}
static void put_u32(Cursor *c, uint32_t v) { put(c, &v, 4); }

size_t record_encode(const Record *r, uint8_t *out, size_t out_bytes) {
  size_t bytes = record_encoded_bytes(r);
  if (bytes > out_bytes) DIE("record_encode: %zu bytes needed, %zu given", bytes, out_bytes);
  if (r->kind == RECORD_TOKENS && (r->seq_count < 0 || r->seq_count > RECORD_MAX_SEQS))
    DIE("record_encode: %d sequences (at most %d)", r->seq_count, RECORD_MAX_SEQS);
  Cursor c = {.out = out};
  uint16_t version = RECORD_VERSION;
  uint8_t kind = (uint8_t)r->kind, format = (uint8_t)r->image_format;
  put(&c, kMagic, 4);
  put(&c, &version, 2);
  put(&c, &kind, 1);
  put(&c, &format, 1);
  c.pos += 8;  // the checksum, once the rest is written
  if (r->kind == RECORD_IMAGE_LABEL) {
    put(&c, &r->label, 4);
  } else if (r->kind == RECORD_IMAGE_BOXES) {
    put(&c, &r->image_id, 8);
    put_u32(&c, (uint32_t)r->box_count);
    put(&c, r->boxes, (size_t)r->box_count * 16);
    put(&c, r->box_labels, (size_t)r->box_count * 4);
  } else {
    put_u32(&c, (uint32_t)r->seq_count);
    for (int32_t s = 0; s < r->seq_count; s++) put_u32(&c, (uint32_t)r->seq_len[s]);
    for (int32_t s = 0; s < r->seq_count; s++) put(&c, r->seqs[s], 4 * (size_t)r->seq_len[s]);
  }
  if (r->kind != RECORD_TOKENS) {
    put_u32(&c, (uint32_t)r->image_bytes);
    put(&c, r->image, r->image_bytes);
  }
  record_seal(out, c.pos);
  return c.pos;
}

static bool fail(char *err, size_t err_bytes, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static bool fail(char *err, size_t err_bytes, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, err_bytes, fmt, ap);
  va_end(ap);
  return false;
}

// Takes `bytes` from the value; NULL when the value is shorter.
static const uint8_t *take(Cursor *c, size_t bytes) {
  if (bytes > c->end - c->pos) return NULL;
  const uint8_t *p = c->in + c->pos;
  c->pos += bytes;
  return p;
}

static bool take_u32(Cursor *c, uint32_t *v) {
  const uint8_t *p = take(c, 4);
  if (p) memcpy(v, p, 4);
  return p != NULL;
}

static bool decode_image(Cursor *c, Record *r) {
  uint32_t bytes;
  if (!take_u32(c, &bytes)) return false;
  r->image_bytes = bytes;
  r->image = take(c, bytes);
  return r->image != NULL;
}

static bool decode_boxes(Cursor *c, Record *r) {
  const uint8_t *id = take(c, 8);
  uint32_t count;
  if (!id || !take_u32(c, &count) || count > (c->end - c->pos) / 20) return false;
  memcpy(&r->image_id, id, 8);
  r->box_count = (int32_t)count;
  r->boxes = take(c, (size_t)count * 16);
  r->box_labels = take(c, (size_t)count * 4);
  return decode_image(c, r);
}

static bool decode_tokens(Cursor *c, Record *r, char *err, size_t err_bytes) {
  uint32_t count;
  if (!take_u32(c, &count)) return fail(err, err_bytes, "record is truncated");
  if (count > RECORD_MAX_SEQS)
    return fail(err, err_bytes, "%u token sequences (at most %d)", count, RECORD_MAX_SEQS);
  r->seq_count = (int32_t)count;
  for (uint32_t s = 0; s < count; s++) {
    uint32_t len;
    if (!take_u32(c, &len)) return fail(err, err_bytes, "record is truncated");
    r->seq_len[s] = (int32_t)len;
  }
  for (uint32_t s = 0; s < count; s++) {
    r->seqs[s] = take(c, 4 * (size_t)r->seq_len[s]);
    if (!r->seqs[s]) return fail(err, err_bytes, "record is truncated");
  }
  return true;
}

bool record_decode(const void *value, size_t value_bytes, Record *r, char *err,
                   size_t err_bytes) {
  memset(r, 0, sizeof *r);
  Cursor c = {.in = value, .end = value_bytes};
  const uint8_t *head = take(&c, kHeaderBytes);
  if (!head || memcmp(head, kMagic, 4) != 0)
    return fail(err, err_bytes, "not a record of this suite (%zu bytes, no MLRC magic)",
                value_bytes);
  uint16_t version;
  memcpy(&version, head + 4, 2);
  if (version == 1)
    return fail(err, err_bytes,
                "record layout version 1, without checksums: convert the data set again with "
                "this build's converter (remove the folder and rerun prepare_data.sh, or "
                "datasets/*_to_lmdb)");
  if (version != RECORD_VERSION)
    return fail(err, err_bytes,
                "record layout version %u, this build reads version %d (rebuild the "
                "LMDB with this build's converter)", version, RECORD_VERSION);
  uint64_t stored;
  memcpy(&stored, head + kSealedBytes, 8);
  if (stored != checksum(value, value_bytes))
    return fail(err, err_bytes,
                "checksum mismatch over its %zu bytes: the record is damaged; convert the data "
                "set again", value_bytes);
  r->kind = (RecordKind)head[6];
  r->image_format = (ImageFormat)head[7];
  bool ok;
  switch (r->kind) {
    case RECORD_IMAGE_LABEL: {
      const uint8_t *label = take(&c, 4);
      if (label) memcpy(&r->label, label, 4);
      ok = label && decode_image(&c, r);
      break;
    }
    case RECORD_IMAGE_BOXES: ok = decode_boxes(&c, r); break;
    case RECORD_TOKENS:
      if (!decode_tokens(&c, r, err, err_bytes)) return false;
      ok = true;
      break;
    default: return fail(err, err_bytes, "unknown record kind %d", (int)r->kind);
  }
  if (!ok) return fail(err, err_bytes, "%s record is truncated", record_kind_name(r->kind));
  if (r->kind != RECORD_TOKENS && r->image_format != IMAGE_FORMAT_JPEG &&
      r->image_format != IMAGE_FORMAT_PNG)
    return fail(err, err_bytes, "unknown image format %d", (int)r->image_format);
  // Bytes no field accounts for: the checksum covers them, so a record that
  // decodes must be exactly what record_encode writes.
  if (c.pos != c.end)
    return fail(err, err_bytes, "%s record has %zu stray bytes after its fields", record_kind_name(r->kind),
                c.end - c.pos);
  return true;
}

void record_parse(const void *value, size_t value_bytes, const char *name, Record *r) {
  char err[256];
  if (!record_decode(value, value_bytes, r, err, sizeof err)) die_input(name, "%s", err);
}

void record_box(const Record *r, int32_t i, float out[4]) {
  memcpy(out, (const uint8_t *)r->boxes + 16 * (size_t)i, 16);
}

int32_t record_box_label(const Record *r, int32_t i) {
  int32_t v;
  memcpy(&v, (const uint8_t *)r->box_labels + 4 * (size_t)i, 4);
  return v;
}

void record_tokens(const Record *r, int32_t seq, int32_t *out) {
  memcpy(out, r->seqs[seq], 4 * (size_t)r->seq_len[seq]);
}
