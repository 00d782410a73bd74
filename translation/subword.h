// subword.h: the subword tokeniser of the MLPerf Transformer reference
// (tensor2tensor's SubwordTextEncoder), in C over utf8proc.
//
// Text -> tokens: split at every change between "alphanumeric" code points
// (Unicode categories L* and N*) and the rest; a run of the rest that is a
// single space between two alphanumeric tokens is dropped (decoding puts it
// back). Token -> subwords: escape the token ("\" -> "\\", "_" -> "\u", a
// code point outside the vocabulary's alphabet -> "\<decimal>;"), append "_",
// then take the longest vocabulary entry that prefixes the rest, repeatedly.
// Decoding inverts each step.
//
// Vocabulary file (the format a user of the MLPerf reference already has,
// e.g. vocab.ende.32768, 33,708 entries): one entry per line, in single
// quotes ('<pad>', '<EOS>', 'the_', ...), UTF-8. Id = line index; ids 0 and 1
// are <pad> and <EOS> in every vocabulary this suite writes or reads.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SUBWORD_PAD 0
#define SUBWORD_EOS 1

typedef struct Subword Subword;  // opaque: entries, a hash of them, the alphabet

// Reads a vocabulary file; a bad one stops with a one-line error naming the
// file and line.
Subword *subword_load(const char *path);
void subword_save(const Subword *sw, const char *path);
void subword_free(Subword *sw);
int32_t subword_size(const Subword *sw);
const char *subword_entry(const Subword *sw, int32_t id);  // unquoted entry text

// The byte offset of the first invalid UTF-8 sequence in text, -1 when
// there is none: how callers check text before encoding it.
int64_t subword_invalid_utf8(const char *text, size_t n_bytes);

// Ids of UTF-8 text (valid UTF-8 of n_bytes; the caller checks) into ids
// (capacity max_ids); returns how many the text needs, which may exceed
// max_ids (then only max_ids were written). No EOS is appended.
int64_t subword_encode(const Subword *sw, const char *text, size_t n_bytes, int32_t *ids,
                       int64_t max_ids);
// Text of ids (pad and EOS ids are skipped) into out (capacity out_bytes,
// NUL-terminated, truncated to fit); returns the length the text needs
// without the NUL.
size_t subword_decode(const Subword *sw, const int32_t *ids, int64_t n, char *out,
                      size_t out_bytes);

// Building a vocabulary from text (small data sets): feed every line of the
// training text, then build one of about target_size entries (tensor2tensor's
// build_to_target_size: a search over the minimum subword count).
typedef struct SubwordCounts SubwordCounts;
SubwordCounts *subword_counts_new(void);
void subword_counts_add(SubwordCounts *c, const char *text, size_t n_bytes);
void subword_counts_free(SubwordCounts *c);
Subword *subword_build(const SubwordCounts *c, int32_t target_size);

#ifdef __cplusplus
}
#endif
