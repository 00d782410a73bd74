// wmt_data.h: the converted translation data set and its batches.
//
// On disk (datasets/wmt_to_lmdb): DIR/train and DIR/eval, LMDBs of TOKENS
// records (record.h) with two sequences each: the source's ids and the
// target's ids, each ending with SUBWORD_EOS; DIR/vocab.subwords, the
// vocabulary (subword.h); DIR/eval.ref, the eval set's target sentences as
// raw text, one per line, the BLEU reference.
//
// In memory: every pair of a split, read once after run_start, and the
// batches of an epoch: pairs grouped by length into buckets, each batch from
// one bucket with at most max_tokens tokens (max of its source and target
// lengths times its pairs, padding included), the batches shuffled from
// (seed, epoch); each rank takes every size-th batch.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { WMT_TRUNCATE, WMT_DISCARD } WmtLengthMethod;

typedef struct WmtCounts {
  int64_t train_pairs, eval_pairs;
  int32_t vocab_size;
} WmtCounts;

// The record counts and the vocabulary size, checked (the LMDBs and the
// vocabulary exist and agree), without reading the pairs: before run_start.
WmtCounts wmt_data_check(const char *dir);

typedef struct WmtSplit {
  int64_t n_pairs;
  int64_t *src_off, *tgt_off;  // (n_pairs + 1) offsets into tokens
  int32_t *src, *tgt;          // every pair's ids, EOS included
  int64_t dropped;             // pairs dropped by WMT_DISCARD
} WmtSplit;

// Reads DIR/<split> into memory; pairs longer than max_len tokens (either
// side, EOS included) are cut to max_len (their last id made EOS) or dropped.
void wmt_split_read(WmtSplit *s, const char *dir, const char *split, int64_t max_len,
                    WmtLengthMethod method);
void wmt_split_free(WmtSplit *s);

// One batch, padded with SUBWORD_PAD: B pairs, source length S, target T.
typedef struct WmtBatch {
  int64_t b, s, t;
  int32_t *src;      // (B, S) source ids
  int32_t *tgt_in;   // (B, T) decoder input: pad (the start), then target[0..T-2]
  int32_t *tgt_out;  // (B, T) labels: target[0..T-1], pad where the target ended
  int32_t *src_len;  // (B) source lengths
  int64_t n_tokens;  // non-pad target tokens
} WmtBatch;

typedef struct WmtBatches {
  int64_t n_batches;    // this rank's batches this epoch
  int64_t *first;       // (n_batches) each batch's first index into order
  int64_t *count;       // (n_batches) its pairs
  int64_t *order;       // pair indices, grouped into batches
  int64_t max_pairs, max_len;  // the largest batch: pairs, and its padded length
} WmtBatches;

// The batches of an epoch of s for this rank (training).
void wmt_batches_plan(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, uint64_t seed,
                      int64_t epoch, int rank, int size);
// Eval: this rank's contiguous share of the pairs, sorted by source length
// (less padding), in batches of at most max_tokens source tokens; no shuffle.
void wmt_batches_plan_eval(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, int rank,
                           int size);
void wmt_batches_free(WmtBatches *bs);
// Fills batch i (buffers sized by the plan's max_pairs and max_len).
void wmt_batch_fill(const WmtBatches *bs, const WmtSplit *s, int64_t i, WmtBatch *out);

#ifdef __cplusplus
}
#endif
