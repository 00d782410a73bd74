// beam.h: beam search as the MLPerf Transformer reference decodes (beam 4,
// length penalty alpha 0.6), on the host over each step's best candidates.
//
// Per source sentence: `beam` alive hypotheses (at the start one, the empty
// prefix), each step extended by every token; of the 2 beam best
// extensions by total log-probability, those ending in EOS join the
// finished list, scored log_prob / lp(len) with lp(len) = ((5 + len) / 6)^alpha
// (len counts the EOS), which keeps its beam best; the rest (best first, up
// to beam) stay alive. A sentence stops when no alive hypothesis can beat
// its worst finished one even at the longest length (its log-probability
// can only fall: alive_best / lp(max_len) < worst finished), or at
// max_len = source length + extra_len tokens (at most the model's
// positions). The result is the best finished hypothesis, or the best alive
// one when none finished.
#pragma once
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct BeamConfig {
  int beam;
  float alpha;
  int64_t extra_len;  // decode up to the source length plus this
  int64_t max_len;    // and never beyond this many tokens (the model's positions)
  int32_t eos;
} BeamConfig;

// The model as the search sees it. step: for n hypotheses fed ids (n) at
// position t, the k best next tokens of each by its logits, as op_topk
// gives them (best first, equal logits the smaller id first): the logits
// top (n, k) and the ids top_ids (n, k), and each row's log-sum-exp over
// the whole vocabulary, norm (n), as op_logsumexp gives it; all on the
// host. A token's log-probability is top - norm (in double). The search
// needs only the 2 beam best of each hypothesis, so a model on a GPU
// copies those instead of its (n, vocab) logits. reorder: hypothesis i
// continues from hypothesis parent[i] (its cached state), after step t.
typedef struct BeamModel {
  void *ctx;
  int64_t vocab;
  void (*step)(void *ctx, const int32_t *ids, int64_t n, int64_t t, int k, float *top,
               int32_t *top_ids, float *norm);
  void (*reorder)(void *ctx, const int32_t *parent, int64_t n, int64_t t);
} BeamModel;

// Decodes b sentences with the model primed for b * beam hypotheses
// (hypothesis i of sentence i / beam); src_len (b) sets each max length.
// out: (b, max_len) ids without the EOS; out_len (b) their counts.
void beam_search(const BeamModel *model, const BeamConfig *cfg, int64_t b,
                 const int32_t *src_len, int32_t *out, int64_t *out_len);

#ifdef __cplusplus
}
#endif
