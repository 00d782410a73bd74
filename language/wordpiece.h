// wordpiece.h: BERT's WordPiece tokeniser (uncased), in C over utf8proc, with
// the byte span in the original text of every token it produces, so that a
// predicted answer span maps back to the original context.
//
// The rules are those of BERT's reference tokeniser (a basic tokeniser, then
// WordPiece) as Hugging Face's BertWordPieceTokenizer(lowercase=True) applies
// them; where the two differ this follows Hugging Face (README.md,
// "Tokenisation", lists where):
//  1. Clean: NUL, U+FFFD and control characters (categories Cc, Cf, Co and
//     Cs, but not tab, newline and carriage return) are dropped;
//     whitespace (tab, newline, carriage return, Zs, Zl, Zp) splits words.
//  2. A CJK ideograph (the reference's code point ranges) is a word of its own.
//  3. Each character goes to its canonical decomposition (NFD), nonspacing
//     marks (Mn) are dropped: accents stripped; then it is lowercased.
//  4. A punctuation character (ASCII 33-47, 58-64, 91-96, 123-126, or a
//     Unicode P* category) is a word of its own.
//  5. Each word of at most 100 characters (after steps 1-4) is split greedily
//     into the longest vocabulary entry that prefixes it, then the longest
//     "##" entry that prefixes the rest, and so on; a word with no such
//     segmentation, or of more than 100 characters, is one [UNK].
//
// Offsets: each character that steps 1-4 keep carries the bytes of the
// original character it came from ("é" -> "e" carries both bytes of "é"); a
// token spans from the first byte of its first character to the last byte of
// its last character, so that a dropped accent or control character between
// two characters of a token lies inside its span, one before or after it
// does not.
#pragma once
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The longest word, in characters, that gets pieces rather than one [UNK].
#define WP_MAX_WORD_CHARS 100

typedef struct WpVocab WpVocab;  // opaque: the tokens and a hash of them

// The ids of the special tokens every BERT vocabulary holds.
typedef struct WpSpecialIds {
  int32_t unk, cls, sep, pad;
} WpSpecialIds;

// One token: its vocabulary id and the bytes [start, end) of the input text
// it came from.
typedef struct WpToken {
  int32_t id;
  int32_t start, end;
} WpToken;

// Reads vocab.txt: one token per line, UTF-8, id = line index (from 0);
// trailing spaces, tabs and a carriage return of a line are not part of its
// token. A missing or empty file, an empty line, invalid UTF-8, a NUL byte,
// a token twice or a missing [UNK], [CLS], [SEP] or [PAD] stops with a one-line
// error naming the file (and the line).
WpVocab *wp_vocab_load(const char *path);
void wp_vocab_free(WpVocab *v);
int32_t wp_vocab_size(const WpVocab *v);
WpSpecialIds wp_vocab_special(const WpVocab *v);
// The id of the token of n_bytes at token, -1 when the vocabulary lacks it.
int32_t wp_vocab_id(const WpVocab *v, const char *token, size_t n_bytes);
// The text of id (NUL-terminated), as the file has it.
const char *wp_vocab_token(const WpVocab *v, int32_t id);

// The tokens of UTF-8 text (n_bytes < 2^31) into out (capacity cap); returns
// how many the text has, which may exceed cap (then only the first cap were
// written). A text never has more tokens than bytes (no character of k bytes
// decomposes into more than k characters that are kept), so cap = n_bytes
// always suffices. No [CLS] or [SEP] is added, and "[SEP]" in the text is
// text. A byte that starts no valid UTF-8 sequence reads as U+FFFD, which
// step 1 drops. Allocates nothing.
int64_t wp_tokenize(const WpVocab *v, const char *text, size_t n_bytes, WpToken *out, int64_t cap);

// The code points (characters) of n bytes of UTF-8 at s, or -1 with
// *bad_byte the offset of the first byte that starts no valid UTF-8
// sequence (the check of vocab.txt lines and of SQuAD's texts).
int64_t wp_utf8_chars(const char *s, size_t n, int64_t *bad_byte);

#ifdef __cplusplus
}
#endif
