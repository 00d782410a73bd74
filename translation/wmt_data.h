// wmt_data.h: the converted translation data set and its batches.
//
// On disk (datasets/wmt_to_lmdb): DIR/train and DIR/eval, LMDBs of TOKENS
// records (record.h) with two sequences each: the source's ids and the
// target's ids, each ending with SUBWORD_EOS; DIR/vocab.subwords, the
// vocabulary (subword.h); DIR/eval.ref, the eval set's target sentences as
// raw text, one per line, the BLEU reference.
//
// In memory: every pair of a split, read once after run_start, and the
// batches of an epoch.
//
// Training batches (the MLPerf reference's utils/dataset.py, _batch_examples
// and _create_min_max_boundaries, made deterministic):
// - A pair's length is the longer of its source and target (EOS included).
// - Buckets: boundaries 8, then x -> max(x + 1, floor(1.1 x)) while below
//   the split's max_len; bucket i holds lengths in [upper[i-1], upper[i])
//   (upper[-1] = 0), the last bucket's upper bound being max_len + 1
//   (wmt_bucket_bounds).
// - A batch holds pairs of one bucket only, at most max_tokens / upper[i] of
//   them (the reference's rule), so pairs x padded length <= max_tokens for
//   source and target alike: buffers of max_tokens ids hold any training
//   batch of any epoch. Each bucket's last batch may be short.
// - Epoch e: the pairs of each bucket are shuffled, cut into batches, and
//   the batches of all buckets shuffled together, from one Rng of
//   (seed, stream with epoch e): the same on every machine and rank count.
// - Ranks: rank r of W takes global batches r, r + W, r + 2W, ...: every
//   rank n_global / W batches; the last n_global % W batches of the epoch's
//   shuffled order (a different few each epoch) are not used that epoch.
// Eval batches: rank r's contiguous share [n r / W, n (r + 1) / W) of the
// pairs, sorted by source length (ties by index), cut greedily into batches
// of at most max_tokens padded source tokens (a longer pair alone); no
// shuffle. order[] holds the pairs' indices in the split, so the caller puts
// each hypothesis back in its place; ranks may get different batch counts.
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

// The record counts and the vocabulary size, checked without reading the
// pairs (before run_start): DIR/train and DIR/eval open and hold records,
// DIR/vocab.subwords begins with '<pad>' and '<EOS>' (its entries: its
// lines), DIR/eval.ref has a line per eval pair. Each failure is a one-line
// error naming the file.
WmtCounts wmt_data_check(const char *dir);

typedef struct WmtSplit {
  int64_t n_pairs;
  int64_t max_len;             // the length limit read with (or, with none, the longest pair)
  int64_t *src_off, *tgt_off;  // (n_pairs + 1) offsets into tokens
  int32_t *src, *tgt;          // every pair's ids, EOS included
  int64_t dropped;             // pairs dropped by WMT_DISCARD
} WmtSplit;

// Reads DIR/<split> into memory; pairs longer than max_len tokens (either
// side, EOS included) are cut to max_len (the first max_len - 1 ids, then
// EOS) or dropped, as the reference's _filter_max_length does. max_len 0:
// no limit (eval, where every line of eval.ref needs its hypothesis);
// otherwise max_len >= 2. Ids are checked against DIR/vocab.subwords: each
// side is 1..vocab-1 (no pad) and ends with EOS; a record that is not TOKENS
// with two sequences, or breaks that, stops with "error: DIR/split record
// N: ...". A split left with no pair is an error too.
void wmt_split_read(WmtSplit *s, const char *dir, const char *split, int64_t max_len,
                    WmtLengthMethod method);
void wmt_split_free(WmtSplit *s);

// The eval split of DIR for decoding with a model of max_positions
// positions, up to extra_len tokens past each source (the reference's
// extra_decode_length). whole: every source as it is, as the v0.7 rules
// want the eval set (training_rules.adoc, "Data Representation": no
// truncation of the evaluation set); the longest source plus extra_len
// must fit in max_positions, else a one-line error naming --max_positions
// and the record. Not whole (a scaled run's shortcut): sources (and
// targets) cut to max_positions, decoding then stopping there. Returns the
// longest source read, in tokens (EOS included).
int64_t wmt_eval_read(WmtSplit *s, const char *dir, int64_t max_positions, int64_t extra_len,
                      bool whole);

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
  int64_t max_pairs, max_len;  // over this plan's batches: most pairs, longest padded side
} WmtBatches;

// The training buckets' upper bounds (exclusive) for pairs of at most
// max_len tokens into upper (NULL: only count them); returns their count.
int64_t wmt_bucket_bounds(int64_t max_len, int64_t *upper);

// The batches of an epoch of s for this rank (training); max_tokens must be
// at least s->max_len + 1 (else a one-line error), so every bucket holds a pair.
void wmt_batches_plan(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, uint64_t seed,
                      int64_t epoch, int rank, int size);
// Eval: this rank's contiguous share of the pairs, sorted by source length
// (less padding), in batches of at most max_tokens source tokens; no shuffle.
void wmt_batches_plan_eval(WmtBatches *bs, const WmtSplit *s, int64_t max_tokens, int rank,
                           int size);
void wmt_batches_free(WmtBatches *bs);
// Fills batch i into the caller's buffers (each at least max_pairs x
// max_len ids; src_len max_pairs): row j is pair order[first[i] + j], its
// source padded to S = the batch's longest source, its target to T;
// tgt_in[j][0] is pad (the reference's shift right), tgt_in[j][k] =
// target[k-1]; tgt_out[j][k] = target[k], pad past its end.
void wmt_batch_fill(const WmtBatches *bs, const WmtSplit *s, int64_t i, WmtBatch *out);

#ifdef __cplusplus
}
#endif
