// squad_data.h: the BERT fine-tune's data set as squad_to_lmdb writes it
// (DATA_DIR/lmdb: train/ and dev/ LMDBs of windows, dev.json, vocab.txt),
// in memory, and its batches.
//
// Training: every window once an epoch, in an order drawn from (seed,
// epoch), optionally grouped by length (--length_group); global batches of
// batch_size windows, rank r taking the r-th share of each; a batch is
// padded to its longest window (not to max_seq_length), pad id 0, token
// type 0.
// Evaluation: the dev questions are shared out by index (question q to
// rank q % ranks), each rank running all windows of its questions.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "bert_model.h"
#include "squad_features.h"

#ifdef __cplusplus
extern "C" {
#endif

// The windows of one split (squad_features.h's SquadFeature, read back).
typedef struct SquadSplit {
  int64_t n;
  SquadFeature *windows;
  int64_t max_tokens;  // the longest window
} SquadSplit;

// Counts checked before a run starts: that the folder is there, windows in
// train/ and dev/, and that dev.json and vocab.txt are there.
typedef struct SquadCounts {
  int64_t train_windows, dev_windows;
} SquadCounts;
SquadCounts squad_data_check(const char *lmdb_dir);
// Dies unless the data set's vocab.txt fits the model's vocab_size (its
// token ids index the model's embedding table); model names the model.
void squad_data_check_vocab(const char *lmdb_dir, int64_t vocab_size, const char *model);

// Reads split ("train" or "dev") of lmdb_dir; a bad record stops with its name.
void squad_split_read(SquadSplit *s, const char *lmdb_dir, const char *split);
void squad_split_free(SquadSplit *s);

// Host buffers of one batch (BertBatch's arrays), for up to max_b windows
// of max_t tokens.
typedef struct SquadBatchBuf {
  int32_t *ids, *types, *len, *start, *end;
  int64_t max_b, max_t;
} SquadBatchBuf;
void squad_batch_buf_init(SquadBatchBuf *buf, int64_t max_b, int64_t max_t);
void squad_batch_buf_free(SquadBatchBuf *buf);

// The batch of windows idx[0..n) of s into buf: a BertBatch padded to the
// longest of them.
BertBatch squad_batch_fill(const SquadSplit *s, const int64_t *idx, int64_t n, SquadBatchBuf *buf);

// This epoch's order of s's windows (n of them, malloc'd), drawn from (seed,
// epoch). With group > 0, batches of `batch` windows of similar length: the
// shuffled order is cut into runs of group batches, each run sorted by
// window length (longest first, ties by place), and the whole batches of
// all runs are shuffled (the windows after the last whole batch stay at the
// end). A batch pads to its longest window, so this cuts the padding (Hugging
// Face's group_by_length, with runs of 50 batches).
int64_t *squad_epoch_order(const SquadSplit *s, uint64_t seed, int64_t epoch, int64_t batch,
                           int64_t group);

#ifdef __cplusplus
}
#endif
