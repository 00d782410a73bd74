// Records, the LMDB store and the sampler: round trips of every record kind,
// bad values and bad directories, concurrent readers, shards and shuffles.
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/check.h"
#include "core/file.h"
#include "data/lmdb_store.h"
#include "data/record.h"
#include "data/sampler.h"
#include "tests/harness/test.h"

static const uint8_t kImage[] = {0xff, 0xd8, 0xff, 0xe0, 1, 2, 3, 4, 5};

static uint8_t *encode(const Record *r, size_t *bytes) {
  *bytes = record_encoded_bytes(r);
  uint8_t *buf = malloc(*bytes);
  CHECK_EQ_INT(record_encode(r, buf, *bytes), *bytes);
  return buf;
}

static void image_label_round_trip(void) {
  Record in = {.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG, .image = kImage,
               .image_bytes = sizeof kImage, .label = 917};
  size_t bytes;
  uint8_t *buf = encode(&in, &bytes);
  CHECK_EQ_INT(bytes, 16 + 4 + 4 + sizeof kImage);
  Record out;
  char err[256];
  REQUIRE(record_decode(buf, bytes, &out, err, sizeof err));
  CHECK_EQ_INT(out.kind, RECORD_IMAGE_LABEL);
  CHECK_EQ_INT(out.image_format, IMAGE_FORMAT_JPEG);
  CHECK_EQ_INT(out.label, 917);
  REQUIRE(out.image_bytes == sizeof kImage);
  CHECK(memcmp(out.image, kImage, sizeof kImage) == 0);
  free(buf);
}

static void image_boxes_round_trip(void) {
  float boxes[3][4] = {{0.1f, 0.2f, 0.3f, 0.4f}, {0, 0, 1, 1}, {0.5f, 0.25f, 0.75f, 0.875f}};
  int32_t labels[3] = {1, 80, 17};
  Record in = {.kind = RECORD_IMAGE_BOXES, .image_format = IMAGE_FORMAT_PNG, .image = kImage,
               .image_bytes = sizeof kImage, .image_id = 397133, .box_count = 3,
               .boxes = boxes, .box_labels = labels};
  size_t bytes;
  uint8_t *buf = encode(&in, &bytes);
  // Decode from an odd address, as LMDB may hand out.
  uint8_t *odd = malloc(bytes + 1);
  memcpy(odd + 1, buf, bytes);
  Record out;
  char err[256];
  REQUIRE(record_decode(odd + 1, bytes, &out, err, sizeof err));
  CHECK_EQ_INT(out.image_id, 397133);
  REQUIRE(out.box_count == 3);
  for (int i = 0; i < 3; i++) {
    float b[4];
    record_box(&out, i, b);
    CHECK(memcmp(b, boxes[i], sizeof b) == 0);
    CHECK_EQ_INT(record_box_label(&out, i), labels[i]);
  }
  CHECK_EQ_INT(out.image_format, IMAGE_FORMAT_PNG);
  CHECK(out.image_bytes == sizeof kImage && memcmp(out.image, kImage, sizeof kImage) == 0);
  free(odd);
  free(buf);
}

static void tokens_round_trip(void) {
  int32_t src[5] = {4, 8, 15, 16, 23}, tgt[2] = {42, -1};
  Record in = {.kind = RECORD_TOKENS, .seq_count = 3, .seq_len = {5, 2, 0},
               .seqs = {src, tgt, NULL}};
  size_t bytes;
  uint8_t *buf = encode(&in, &bytes);
  Record out;
  char err[256];
  REQUIRE(record_decode(buf, bytes, &out, err, sizeof err));
  REQUIRE(out.seq_count == 3);
  CHECK_EQ_INT(out.seq_len[0], 5);
  CHECK_EQ_INT(out.seq_len[1], 2);
  CHECK_EQ_INT(out.seq_len[2], 0);
  int32_t got[5];
  record_tokens(&out, 0, got);
  CHECK(memcmp(got, src, sizeof src) == 0);
  record_tokens(&out, 1, got);
  CHECK(got[0] == 42 && got[1] == -1);
  free(buf);
}

typedef struct BadValue {
  const uint8_t *value;
  size_t bytes;
} BadValue;

static void parse_child(void *arg) {
  BadValue *b = arg;
  Record r;
  record_parse(b->value, b->bytes, "train record 5", &r);
}

static void bad_values_named(void) {
  Record in = {.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG, .image = kImage,
               .image_bytes = sizeof kImage, .label = 3};
  size_t bytes;
  uint8_t *buf = encode(&in, &bytes);
  BadValue truncated = {buf, bytes - 1};
  CHECK_DIES_WITH(parse_child, &truncated, "train record 5: checksum mismatch");
  uint8_t *other = malloc(bytes);
  memcpy(other, buf, bytes - 1);
  record_seal(other, bytes - 1);  // a short record with a good checksum: the layout's check
  BadValue short_sealed = {other, bytes - 1};
  CHECK_DIES_WITH(parse_child, &short_sealed, "train record 5: image+label record is truncated");
  uint8_t *longer = malloc(bytes + 2);
  memcpy(longer, buf, bytes);
  longer[bytes] = longer[bytes + 1] = 7;
  record_seal(longer, bytes + 2);  // sealed, but two bytes no field accounts for
  BadValue stray = {longer, bytes + 2};
  CHECK_DIES_WITH(parse_child, &stray, "train record 5: image+label record has 2 stray bytes after its fields");
  free(longer);
  memcpy(other, buf, bytes);
  other[4] = 3;  // layout version 3
  BadValue version = {other, bytes};
  CHECK_DIES_WITH(parse_child, &version, "train record 5: record layout version 3");
  other[4] = 1;  // version 1: no checksums
  CHECK_DIES_WITH(parse_child, &version, "train record 5: record layout version 1, without checksums: "
                  "convert the data set again");
  BadValue garbage = {(const uint8_t *)"hello world", 11};
  CHECK_DIES_WITH(parse_child, &garbage, "no MLRC magic");
  memcpy(other, buf, bytes);
  other[7] = 9;  // image format, resealed: the field's own check
  record_seal(other, bytes);
  BadValue format = {other, bytes};
  CHECK_DIES_WITH(parse_child, &format, "unknown image format 9");
  free(other);
  free(buf);
}

// One flipped bit anywhere but in the checksum itself, in any kind of
// record, is a checksum mismatch naming the record (a flip in the checksum
// is one too); and a record resealed after the flip decodes again.
static void any_flipped_bit_is_found(void) {
  int32_t seq[3] = {7, 8, 9};
  float box[4] = {0.1f, 0.2f, 0.3f, 0.4f};
  int32_t box_label = 5;
  Record kinds[3] = {
      {.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG, .image = kImage,
       .image_bytes = sizeof kImage, .label = 3},
      {.kind = RECORD_IMAGE_BOXES, .image_format = IMAGE_FORMAT_PNG, .image = kImage,
       .image_bytes = sizeof kImage, .image_id = 42, .box_count = 1, .boxes = box,
       .box_labels = &box_label},
      {.kind = RECORD_TOKENS, .seq_count = 1, .seq_len = {3}, .seqs = {seq}}};
  int missed = 0, flips = 0;
  for (int k = 0; k < 3; k++) {
    size_t bytes;
    uint8_t *buf = encode(&kinds[k], &bytes);
    for (size_t bit = 0; bit < 8 * bytes; bit++) {
      if (bit / 8 < 6) continue;  // the magic and version have checks of their own
      buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      Record out;
      char err[256] = "";
      flips++;
      missed += record_decode(buf, bytes, &out, err, sizeof err) || !strstr(err, "checksum mismatch");
      buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    Record out;
    char err[256];
    CHECK_MSG(record_decode(buf, bytes, &out, err, sizeof err), "%s after the flips: %s",
              record_kind_name(kinds[k].kind), err);
    free(buf);
  }
  CHECK_MSG(missed == 0, "%d of %d single-bit flips not found", missed, flips);
  size_t bytes;
  uint8_t *buf = encode(&kinds[0], &bytes);
  buf[bytes - 1] ^= 1;
  BadValue damaged = {buf, bytes};
  CHECK_DIES_WITH(parse_child, &damaged, "train record 5: checksum mismatch over its");
  free(buf);
}

// Record i of the test store: label i * 7, i + 1 image bytes of value i.
static size_t test_record(int64_t i, uint8_t *buf, size_t buf_bytes, uint8_t *image) {
  memset(image, (int)(i & 0xff), (size_t)i + 1);
  Record r = {.kind = RECORD_IMAGE_LABEL, .image_format = IMAGE_FORMAT_JPEG, .image = image,
              .image_bytes = (size_t)i + 1, .label = (int32_t)(i * 7)};
  return record_encode(&r, buf, buf_bytes);
}

enum { kStoreRecords = 3000 };

static const char *test_store(void) {
  static char dir[512];
  if (dir[0]) return dir;
  snprintf(dir, sizeof dir, "%s/store/train", test_tmpdir());
  LmdbWriter *w = lmdb_writer_open(dir);
  uint8_t *buf = malloc(kStoreRecords + 64), *image = malloc(kStoreRecords);
  for (int64_t i = 0; i < kStoreRecords; i++)
    lmdb_writer_put(w, buf, test_record(i, buf, kStoreRecords + 64, image));
  CHECK_EQ_INT(lmdb_writer_count(w), kStoreRecords);
  lmdb_writer_close(w);
  free(buf);
  free(image);
  return dir;
}

static int check_record(LmdbTxn *t, int64_t i) {
  size_t bytes;
  const void *value = lmdb_txn_get(t, i, &bytes);
  Record r;
  char err[256];
  if (!record_decode(value, bytes, &r, err, sizeof err)) return 0;
  if (r.label != i * 7 || r.image_bytes != (size_t)i + 1) return 0;
  for (size_t b = 0; b < r.image_bytes; b++)
    if (r.image[b] != (uint8_t)(i & 0xff)) return 0;
  return 1;
}

static void lmdb_round_trip_random_access(void) {
  LmdbReader *r = lmdb_reader_open(test_store());
  CHECK_EQ_INT(lmdb_reader_count(r), kStoreRecords);
  LmdbTxn *t = lmdb_txn_begin(r);
  int good = 0;
  // A stride coprime to the count visits every record out of order.
  for (int64_t k = 0; k < kStoreRecords; k++) good += check_record(t, (k * 1237) % kStoreRecords);
  CHECK_EQ_INT(good, kStoreRecords);
  lmdb_txn_end(t);
  lmdb_reader_close(r);
}

typedef struct ReaderThread {
  LmdbReader *reader;
  int first;
  int good;
} ReaderThread;

static void *reader_thread(void *arg) {
  ReaderThread *rt = arg;
  LmdbTxn *t = lmdb_txn_begin(rt->reader);
  for (int64_t k = 0; k < kStoreRecords; k++)
    rt->good += check_record(t, (rt->first + k * 7) % kStoreRecords);
  lmdb_txn_end(t);
  return NULL;
}

static void lmdb_many_reader_threads(void) {
  enum { kThreads = 8 };
  LmdbReader *r = lmdb_reader_open(test_store());
  pthread_t th[kThreads];
  ReaderThread rt[kThreads];
  for (int i = 0; i < kThreads; i++) {
    rt[i] = (ReaderThread){r, i * 101, 0};
    pthread_create(&th[i], NULL, reader_thread, &rt[i]);
  }
  for (int i = 0; i < kThreads; i++) {
    pthread_join(th[i], NULL);
    CHECK_EQ_INT(rt[i].good, kStoreRecords);
  }
  lmdb_reader_close(r);
}

static void open_child(void *arg) { lmdb_reader_open(arg); }

static void get_child(void *arg) {
  LmdbReader *r = lmdb_reader_open(arg);
  size_t bytes;
  lmdb_txn_get(lmdb_txn_begin(r), kStoreRecords, &bytes);
}

static void writer_child(void *arg) { lmdb_writer_open(arg); }

static void lmdb_bad_directories(void) {
  char missing[512], file[512], empty[512], garbage[512], garbage_data[600];
  snprintf(missing, sizeof missing, "%s/no/such/lmdb", test_tmpdir());
  CHECK_DIES_WITH(open_child, missing, "no/such/lmdb: cannot open LMDB directory");
  snprintf(file, sizeof file, "%s/plain_file", test_tmpdir());
  FILE *f = fopen(file, "w");
  fputs("x", f);
  fclose(f);
  CHECK_DIES_WITH(open_child, file, "plain_file: is not a directory");
  snprintf(empty, sizeof empty, "%s/empty_dir", test_tmpdir());
  mkdir(empty, 0755);
  CHECK_DIES_WITH(open_child, empty, "empty_dir: no readable data.mdb");
  snprintf(garbage, sizeof garbage, "%s/garbage_db", test_tmpdir());
  mkdir(garbage, 0755);
  snprintf(garbage_data, sizeof garbage_data, "%s/data.mdb", garbage);
  f = fopen(garbage_data, "w");
  for (int i = 0; i < 5000; i++) fputc(i * 31, f);
  fclose(f);
  CHECK_DIES_WITH(open_child, garbage, "garbage_db: cannot open as LMDB");
  CHECK_DIES_WITH(get_child, (void *)test_store(), "record 3000: no such record");
  CHECK_DIES_WITH(writer_child, (void *)test_store(), "already holds an LMDB data set");
}

// A writer that never closes (a converter killed midway) leaves DIR.partial
// and no DIR; a reader names the unfinished conversion, and the next writer
// replaces the leftover.
static void unfinished_writer_child(void *arg) {
  LmdbWriter *w = lmdb_writer_open(arg);
  uint8_t buf[128], image[64];
  for (int64_t i = 0; i < 2000; i++) lmdb_writer_put(w, buf, test_record(i % 60, buf, sizeof buf, image));
  exit(1);  // killed before lmdb_writer_close
}

static void lmdb_unfinished_conversion(void) {
  static char dir[512], partial[600];
  snprintf(dir, sizeof dir, "%s/unfinished/train", test_tmpdir());
  snprintf(partial, sizeof partial, "%s.partial", dir);
  char msg[1024];
  test_run_child(unfinished_writer_child, dir, msg, sizeof msg);
  struct stat st;
  CHECK_MSG(stat(dir, &st) != 0, "%s exists after an unfinished conversion", dir);
  CHECK_MSG(stat(partial, &st) == 0, "no %s", partial);
  CHECK_DIES_WITH(open_child, dir, "unfinished/train: missing; ");
  CHECK_DIES_WITH(open_child, dir, "train.partial is an unfinished conversion");
  // The next conversion starts afresh and ends complete.
  LmdbWriter *w = lmdb_writer_open(dir);
  uint8_t buf[128], image[64];
  for (int64_t i = 0; i < 5; i++) lmdb_writer_put(w, buf, test_record(i, buf, sizeof buf, image));
  lmdb_writer_close(w);
  CHECK_MSG(stat(partial, &st) != 0, "%s left behind", partial);
  LmdbReader *r = lmdb_reader_open(dir);
  CHECK_EQ_INT(lmdb_reader_count(r), 5);
  lmdb_reader_close(r);
}

static void read_all_child(void *arg) {
  LmdbReader *r = lmdb_reader_open(arg);
  LmdbTxn *t = lmdb_txn_begin(r);
  for (int64_t i = 0; i < lmdb_reader_count(r); i++) check_record(t, i);
}

// A data.mdb cut short (a copy that ran out of disk) once killed the trainer
// with SIGBUS on the first read past the end; now the reader refuses it at
// open. Cut at several places, each must be refused by name, never a signal.
static void lmdb_truncated_refused(void) {
  const char *src = test_store();
  char src_data[600];
  snprintf(src_data, sizeof src_data, "%s/data.mdb", src);
  size_t n;
  uint8_t *bytes = file_read(src_data, &n);
  const double cuts[] = {0.99, 0.75, 0.5, 0.1};
  for (int c = 0; c < 4; c++) {
    static char dir[512];
    char data[600];
    snprintf(dir, sizeof dir, "%s/cut%d", test_tmpdir(), c);
    mkdir(dir, 0755);
    snprintf(data, sizeof data, "%s/data.mdb", dir);
    file_write(data, bytes, (size_t)((double)n * cuts[c]) / 4096 * 4096);
    CHECK_DIES_WITH(read_all_child, dir, "data.mdb is truncated");
  }
  free(bytes);
}

static void eval_shards_cover_once(void) {
  enum { kCount = 103, kWorld = 4 };
  int seen[kCount] = {0};
  int64_t total = 0;
  for (int rank = 0; rank < kWorld; rank++) {
    Sampler s = {.count = kCount, .seed = 1, .rank = rank, .world = kWorld, .shuffle = false};
    int64_t n = sampler_shard_count(&s);
    uint32_t order[kCount];
    sampler_epoch_order(&s, 0, order);
    for (int64_t k = 0; k < n; k++) seen[order[k]]++;
    total += n;
  }
  CHECK_EQ_INT(total, kCount);
  for (int i = 0; i < kCount; i++) CHECK_MSG(seen[i] == 1, "record %d read %d times", i, seen[i]);
}

static void train_shards_shuffle(void) {
  enum { kCount = 1003, kWorld = 3 };
  uint32_t order[kWorld][kCount], again[kCount], next_epoch[kCount];
  int seen[kCount] = {0};
  for (int rank = 0; rank < kWorld; rank++) {
    Sampler s = {.count = kCount, .seed = 77, .rank = rank, .world = kWorld, .shuffle = true};
    CHECK_EQ_INT(sampler_shard_count(&s), kCount / kWorld);
    sampler_epoch_order(&s, 5, order[rank]);
    for (int k = 0; k < kCount / kWorld; k++) seen[order[rank][k]]++;
  }
  int dropped = 0, twice = 0;
  for (int i = 0; i < kCount; i++) {
    dropped += seen[i] == 0;
    twice += seen[i] > 1;
  }
  CHECK_EQ_INT(twice, 0);
  CHECK_EQ_INT(dropped, kCount % kWorld);
  Sampler s0 = {.count = kCount, .seed = 77, .rank = 0, .world = kWorld, .shuffle = true};
  sampler_epoch_order(&s0, 5, again);
  CHECK(memcmp(again, order[0], sizeof(uint32_t) * (kCount / kWorld)) == 0);
  sampler_epoch_order(&s0, 6, next_epoch);
  int same = 0, in_order = 0;
  for (int k = 0; k < kCount / kWorld; k++) {
    same += next_epoch[k] == order[0][k];
    in_order += order[0][k] == (uint32_t)(k * kWorld);
  }
  // Two independent shuffles agree at ~1/1003 of the positions.
  CHECK_MSG(same < 10, "epochs 5 and 6 share %d of %d positions", same, kCount / kWorld);
  CHECK_MSG(in_order < 10, "epoch 5 left %d records in place", in_order);
}

int main(void) {
  TEST_RUN(image_label_round_trip);
  TEST_RUN(image_boxes_round_trip);
  TEST_RUN(tokens_round_trip);
  TEST_RUN(bad_values_named);
  TEST_RUN(any_flipped_bit_is_found);
  TEST_RUN(lmdb_round_trip_random_access);
  TEST_RUN(lmdb_many_reader_threads);
  TEST_RUN(lmdb_bad_directories);
  TEST_RUN(lmdb_unfinished_conversion);
  TEST_RUN(lmdb_truncated_refused);
  TEST_RUN(eval_shards_cover_once);
  TEST_RUN(train_shards_shuffle);
  return test_finish();
}
