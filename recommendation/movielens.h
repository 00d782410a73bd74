// movielens.h: MovieLens ratings for NCF - the ratings.csv reader, the MLPerf
// split and the binary file the trainer maps, defined in movielens.c, which
// the converter, the generator (which must draw the converter's very test
// negatives to score its true model) and the trainer's loader share.
//
// The split (MLPerf NCF reference, convert.py):
//   - users with fewer than 20 ratings are dropped;
//   - users and items get dense ids 0.. in ascending order of their original
//     userId / movieId (items: those rated by a kept user);
//   - each user's latest rating (largest timestamp) is the test positive; of
//     ratings with the same timestamp the one on the later line of
//     ratings.csv is the latest (ml-20m is sorted by userId then movieId, so
//     that is the larger movieId). The rest are training positives;
//   - 999 test negatives per user, drawn with replacement (as the reference's
//     np.random.choice) uniformly from the items the user never rated (train
//     or test), number j of user u from Philox (seed, ML_STREAM_TEST_NEG,
//     u * 999 + j); stored ascending, so repeats are neighbours. The
//     reference drew from all items minus the training items, which let the
//     test positive itself be drawn as a negative; here it cannot be.
//
// The file <dir>/ncf.bin, little-endian, version 1:
//   MlFileHeader (136 bytes; magic "NCFMLBIN")
//   then sections at the byte offsets the header gives, each 64-byte aligned:
//     train_offsets  int64 (n_users + 1)   CSR row starts into train_items
//     train_items    int32 (n_train)       each user's training items, ascending
//     test_items     int32 (n_users)       each user's held-out latest item
//     test_negs      int32 (n_users, n_neg) ascending per user, may repeat
//     user_ids       int32 (n_users)       original userId of each dense user
//     item_ids       int32 (n_items)       original movieId of each dense item
// It is written whole or not at all (a temporary name, renamed when
// complete), and a reader checks every header field against the file's size
// and contents before use (ml_data_map).
#pragma once
#include <stddef.h>
#include <stdint.h>

#include "movielens_sampling.h"

#define ML_MIN_RATINGS 20
#define ML_TEST_NEGATIVES 999
#define ML_MAX_ID ((1 << 26) - 1)  // ids index direct tables of this length
#define ML_MAX_RATINGS ((int64_t)1 << 32)  // record indices are 32 bits
#define ML_MAX_NEGATIVES 100000  // test negatives per user (movielens_convert --negatives)
#define ML_VERSION 1u
#define ML_MAGIC "NCFMLBIN"
#define ML_FILE_NAME "ncf.bin"
#define ML_CSV_HEADER "userId,movieId,rating,timestamp"
#define ML_ALIGN_BYTES 64

typedef struct MlFileHeader {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  int64_t n_users, n_items, n_train, n_neg;
  uint64_t neg_seed;      // seed of the test negatives
  int64_t min_ratings;
  uint64_t off_train_offsets, off_train_items, off_test_items, off_test_negs;
  uint64_t off_user_ids, off_item_ids;
  uint64_t file_bytes;
  uint64_t reserved[2];
} MlFileHeader;

// Parsed ratings.csv: record i is on line i + 2 (after the header line).
typedef struct MlRatings {
  int64_t count;
  int32_t *user;       // (count) original userId
  int32_t *item;       // (count) original movieId
  int64_t *timestamp;  // (count) unix seconds
  const char *source;  // the file, for messages
} MlRatings;

// The split, in memory or mapped from ncf.bin (same arrays either way).
typedef struct MlData {
  int64_t n_users, n_items, n_train, n_neg;
  uint64_t neg_seed;
  int64_t min_ratings;
  int64_t *train_offsets;  // (n_users + 1)
  int32_t *train_items;    // (n_train)
  int32_t *test_items;     // (n_users)
  int32_t *test_negs;      // (n_users, n_neg)
  int32_t *user_ids;       // (n_users)
  int32_t *item_ids;       // (n_items)
  void *map;               // the mapping, or NULL when the arrays are owned
  size_t map_bytes;
} MlData;

// ---------------------------------------------------------------- ratings.csv
void ml_ratings_free(MlRatings *r);

// Reads a MovieLens ratings.csv (header userId,movieId,rating,timestamp). A
// UTF-8 byte-order mark before the header is skipped, and so are blank lines
// that end the file; a blank line before a rating is an error naming it.
void ml_ratings_read(const char *path, MlRatings *r);

// ---------------------------------------------------------------- the split
void ml_data_free(MlData *d);

int ml_cmp_i32(const void *a, const void *b);

int64_t ml_max_id(const int32_t *ids, int64_t n);

// The MLPerf split of r (see the top of this file) into d (owned arrays).
void ml_split(const MlRatings *r, int64_t min_ratings, int64_t n_neg,
              uint64_t seed, MlData *d);

// dir/ncf.bin into path (bytes).
void ml_data_path(const char *dir, char *path, size_t bytes);

// Removes dir/ncf.bin if there is one. A converter does this before it
// starts, so that when it fails or is killed no later run trains on the
// data of an earlier conversion.
void ml_data_remove(const char *dir);

// Writes dir/ncf.bin whole or not at all: into ncf.bin.tmp (a stale one of a
// killed run is replaced; readers never open it), flushed to disk, then
// renamed over ncf.bin.
void ml_data_write(const MlData *d, const char *dir);

// ---------------------------------------------------------------- reading ncf.bin
// ml_data_map checks every header field against the file's size and its
// contents before anything else reads it: a damaged, truncated or edited
// file is one line naming the file and the first inconsistency found, never
// an out-of-bounds read, a crash later in training or a silently different
// split.

// The contents against the header, so that no later lookup can go out of
// bounds and the split is the one the converter wrote.
void ml_data_validate(const MlData *d, const char *path);

// The checked header of path: the file is there and complete, its contents
// not yet read.
MlFileHeader ml_data_header(const char *path);

// Maps path (an ncf.bin) read-only into d and checks it.
void ml_data_map(const char *path, MlData *d);

// Every user's test negatives drawn again, as ml_split drew them (from the
// training items, the test item and neg_seed), into out (n_users, n_neg):
// what the converter wrote, drawn where a run wants the drawing timed (the
// v0.5 reference draws them after its clock starts). Users on the team's
// threads.
void ml_draw_all_test_negs(const MlData *d, int32_t *out);
