// record.h: the layout of one data-set record, as stored in an LMDB value.
// Converters encode records, trainers decode them. The layout is versioned:
// a reader meeting another version stops with a message naming the record.
//
// Layout version 2, all integers and floats little-endian, no padding:
//   u8[4] magic "MLRC" | u16 version (2) | u8 kind | u8 image format
//   | u64 checksum: XXH3-64 (Debian's libxxhash) of the fields after it,
//     seeded with the 8 bytes before it, so that a flipped bit anywhere in
//     the record is found when it is read (record_decode)
//   kind IMAGE_LABEL:  i32 label | u32 image_bytes | image bytes
//   kind IMAGE_BOXES:  i64 image_id | u32 box_count
//                      | f32 boxes[box_count][4]   (x_min, y_min, x_max, y_max),
//                                                   fractions of width/height
//                      | i32 box_labels[box_count]   (a negative label: a box
//                                                   training ignores and evaluation
//                                                   counts, a crowd region)
//                      | u32 image_bytes | image bytes
//   kind TOKENS:       u32 seq_count (<= RECORD_MAX_SEQS) | u32 seq_len[seq_count]
//                      | i32 tokens of sequence 0, then 1, ...
// The image bytes are the file as found (JPEG or PNG); the format byte says
// which, so no image is re-encoded on the way in. Token records have format 0.
// Version 1 had no checksum: its data sets are refused, to be converted again.
// XXH3 over CRC32C: Debian has no C CRC32C library, and XXH3 hashed 2.2x
// faster than zlib's CRC-32 here, a few hundredths of a JPEG's decode time.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RECORD_VERSION 2
#define RECORD_MAX_SEQS 5

typedef enum { RECORD_IMAGE_LABEL = 1, RECORD_IMAGE_BOXES = 2, RECORD_TOKENS = 3 } RecordKind;
typedef enum { IMAGE_FORMAT_NONE = 0, IMAGE_FORMAT_JPEG = 1, IMAGE_FORMAT_PNG = 2 } ImageFormat;

// A record's fields. For encoding the pointers are the caller's arrays; after
// decoding they point into the value itself (LMDB values are not aligned, so
// the array fields are read with the accessors below, never cast).
typedef struct Record {
  RecordKind kind;
  ImageFormat image_format;
  const uint8_t *image;      // (image_bytes,) the encoded file
  size_t image_bytes;
  int32_t label;             // IMAGE_LABEL: class index
  int64_t image_id;          // IMAGE_BOXES
  int32_t box_count;
  const void *boxes;         // (box_count, 4) f32
  const void *box_labels;    // (box_count,) i32
  int32_t seq_count;         // TOKENS
  int32_t seq_len[RECORD_MAX_SEQS];
  const void *seqs[RECORD_MAX_SEQS];  // (seq_len[s],) i32 each
} Record;

// Bytes record_encode writes for r.
size_t record_encoded_bytes(const Record *r);
// Writes r into out (out_bytes >= record_encoded_bytes(r)); returns the bytes
// written.
size_t record_encode(const Record *r, uint8_t *out, size_t out_bytes);
// Writes the checksum of an encoded value (record_encode does it): for a test
// or fuzzer that edits a value and wants its fields checked, not its checksum.
void record_seal(void *value, size_t value_bytes);
// Decodes value into r. On a bad value (the checksum first) returns false
// with the reason in err.
bool record_decode(const void *value, size_t value_bytes, Record *r, char *err,
                   size_t err_bytes);
// record_decode, stopping with "error: <name>: <reason>" on a bad value; name
// says which record ("data/train record 17").
void record_parse(const void *value, size_t value_bytes, const char *name, Record *r);

// Element readers for decoded (unaligned) arrays.
void record_box(const Record *r, int32_t i, float out[4]);
int32_t record_box_label(const Record *r, int32_t i);
void record_tokens(const Record *r, int32_t seq, int32_t *out);  // (seq_len[seq],)

const char *record_kind_name(RecordKind kind);
const char *image_format_name(ImageFormat format);

#ifdef __cplusplus
}
#endif
