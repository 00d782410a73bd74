// bleu.h: the Transformer's quality metric, uncased corpus BLEU exactly as
// the MLPerf reference computes it (translation/tensorflow/transformer:
// compute_bleu.py's bleu_wrapper with case_sensitive=False, which calls
// utils/metrics.py's compute_bleu with max_order 4 and the brevity penalty).
//
// Per sentence pair: Python's str.lower() of each line, then bleu_tokenize:
//   1. a punctuation char (category P*) preceded by a char that is not a
//      decimal digit (Nd) is split off:  "(non-Nd)(P)" -> "\1 \2 ";
//   2. a punctuation char followed by a non-Nd char is split off:
//      "(P)(non-Nd)" -> " \1 \2";
//   3. every symbol (category S*) is split off: "(S)" -> " \1 ";
//   each pass a left-to-right regex substitution of non-overlapping matches;
//   then the text is split at Python's whitespace (category Zs or bidi
//   class WS, B, S). So "1,000.5" stays one token and "Hello, world!" is
//   hello , world !
// Corpus statistics: per order n = 1..4, matches = the hypothesis n-grams
// clipped by their count in the reference, possible = the hypothesis
// n-grams; hyp_len and ref_len the token counts. Score: an order with
// possible > 0 and no match gets precision 1 / (2^k possible), k counting
// such orders so far (mteval's "exp" smoothing); an order with possible = 0
// is left out of the sum of logs, which is still divided by 4; brevity
// penalty exp(1 - ref_len / hyp_len) when hyp_len < ref_len.
//
// Where this differs from the reference (inputs on which it would fail or
// which are out of its reach):
//   - the reference raises ZeroDivisionError when the hypotheses have no
//     token at all (brevity ratio 0) or the references none: here the first
//     scores 0 and the second takes no brevity penalty.
//   - the reference returns np.float32(bleu) * 100; here the score stays in
//     double (they differ by at most 6e-6 BLEU points).
//   - the reference reads a file as text (invalid UTF-8 raises); here each
//     byte that does not start a valid UTF-8 sequence reads as U+FFFD (a
//     symbol, so its own token).
//   - Unicode properties come from libutf8proc (its Unicode version), the
//     reference's from the Python that ran it.
//   - Python's lower() maps Σ to final ς by Unicode's Final_Sigma context
//     (after a cased letter, not before one, case-ignorable chars skipped);
//     here "cased" is categories Lu, Ll, Lt and "case-ignorable" Mn, Me, Cf,
//     Lm, Sk (Unicode's lists add a few letters and apostrophes, periods and
//     colons).
// Where sacrebleu (tokenize="intl", lowercase=True, smooth_method="exp")
// differs from the reference and this file follows the reference:
//   - the reference builds its punctuation class by pasting every P char
//     into a regex [...]: the backslash escapes the "]" after it, so "\" is
//     not punctuation there ("a\b" is one token; sacrebleu splits it);
//   - the reference's "non-digit" is non-Nd, sacrebleu's non-N ("²," splits
//     in the reference, not in sacrebleu);
//   - sacrebleu scores 0 when no unigram matches and when some order has no
//     n-gram at all (a corpus of fewer than 4 tokens); the reference smooths
//     the first and leaves the order out in the second.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

#define BLEU_MAX_ORDER 4

// Counts, in double so that distributed eval sums them with one f64
// all-reduce (dist_sum_f64) and they stay exact up to 2^53; summing the
// stats of two halves of a corpus gives the stats of the whole.
typedef struct BleuStats {
  double matches[BLEU_MAX_ORDER];   // clipped n-gram matches, n = 1..4
  double possible[BLEU_MAX_ORDER];  // hypothesis n-grams, n = 1..4
  double hyp_len, ref_len;          // tokens
} BleuStats;

// Adds one sentence pair: detokenised text, UTF-8, NUL-terminated.
void bleu_add(BleuStats *st, const char *hyp, const char *ref);
// Corpus BLEU in 0..100, as sacrebleu prints it.
double bleu_score(const BleuStats *st);
// The tokens bleu_add sees in text (lowercased), joined by single spaces;
// malloc'd, the caller frees it.
char *bleu_tokenize(const char *text);

#ifdef __cplusplus
}
#endif
