// wordpiece.c: the WordPiece tokeniser of wordpiece.h. The text is read one
// character at a time: steps 1-4 of the header turn each into zero or more
// normalised characters that carry its byte span, which gather into the
// current word; a word boundary hands the word to the WordPiece step.
#include "language/wordpiece.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "core/file.h"

enum { REPLACEMENT_CHAR = 0xFFFD };
// The longest canonical decomposition of one character is 4 code points.
enum { MAX_DECOMPOSED = 8 };
// Bytes of a "##" piece of a whole word: the prefix and 4 bytes a character.
enum { MAX_PIECE_BYTES = 2 + 4 * WP_MAX_WORD_CHARS };

// ---------------------------------------------------------------- vocabulary

struct WpVocab {
  char *bytes;         // the file, each token NUL-terminated in place
  int32_t *offset;     // (n_tokens) where token i starts in bytes
  int32_t *n_bytes;    // (n_tokens)
  int32_t n_tokens;
  int32_t *slots;      // (n_slots) a token id or -1; n_slots a power of 2
  int64_t n_slots;
  int32_t max_chars;   // the longest token, in code points
  WpSpecialIds special;
};

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

// The slot holding the token, or the empty slot where it would go.
static int64_t vocab_slot(const WpVocab *v, const char *token, size_t n) {
  int64_t mask = v->n_slots - 1;
  for (int64_t s = (int64_t)(hash_bytes(token, n) & (uint64_t)mask);; s = (s + 1) & mask) {
    int32_t id = v->slots[s];
    if (id < 0 || ((size_t)v->n_bytes[id] == n && memcmp(v->bytes + v->offset[id], token, n) == 0))
      return s;
  }
}

int32_t wp_vocab_id(const WpVocab *v, const char *token, size_t n_bytes) {
  return v->slots[vocab_slot(v, token, n_bytes)];
}

int32_t wp_vocab_size(const WpVocab *v) { return v->n_tokens; }
WpSpecialIds wp_vocab_special(const WpVocab *v) { return v->special; }
const char *wp_vocab_token(const WpVocab *v, int32_t id) { return v->bytes + v->offset[id]; }

void wp_vocab_free(WpVocab *v) {
  if (!v) return;
  free(v->bytes);
  free(v->offset);
  free(v->n_bytes);
  free(v->slots);
  free(v);
}

int64_t wp_utf8_chars(const char *s, size_t n, int64_t *bad_byte) {
  int64_t chars = 0;
  for (size_t i = 0; i < n; chars++) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    if (k <= 0) {
      *bad_byte = (int64_t)i;
      return -1;
    }
    i += (size_t)k;
  }
  return chars;
}

// Adds line `line` (1-based; its token at v->bytes + start, n bytes) as the
// next id.
static void vocab_add(WpVocab *v, const char *path, int64_t line, size_t start, size_t n) {
  char where[4200];
  snprintf(where, sizeof where, "%s:%lld", path, (long long)line);
  const char *token = v->bytes + start;
  int64_t bad = -1, chars = wp_utf8_chars(token, n, &bad);
  if (n == 0) die_input(where, "empty line (each line of a vocabulary is one token)");
  if (chars < 0) die_input(where, "invalid UTF-8 at byte %lld of the line", (long long)bad + 1);
  // Tokens are kept NUL-terminated, and text never holds a NUL (step 1
  // drops it): a NUL in a line is a file that is not a vocabulary.
  const char *nul = memchr(token, 0, n);
  if (nul) die_input(where, "a NUL byte at byte %lld of the line (not a text file?)", (long long)(nul - token) + 1);
  int64_t slot = vocab_slot(v, token, n);
  if (v->slots[slot] >= 0)
    die_input(where, "token '%.*s' repeats line %d", (int)n, token, v->slots[slot] + 1);
  int32_t id = v->n_tokens++;
  v->offset[id] = (int32_t)start;
  v->n_bytes[id] = (int32_t)n;
  v->slots[slot] = id;
  if (chars > v->max_chars) v->max_chars = (int32_t)chars;
}

static int32_t special_id(const WpVocab *v, const char *path, const char *token) {
  int32_t id = wp_vocab_id(v, token, strlen(token));
  if (id < 0) die_input(path, "no %s token (a BERT vocabulary holds [PAD], [UNK], [CLS] and [SEP])", token);
  return id;
}

WpVocab *wp_vocab_load(const char *path) {
  size_t n;
  uint8_t *file = file_read(path, &n);
  WpVocab *v = xcalloc(1, sizeof *v);
  v->bytes = xmalloc(n + 1);  // room for the last line's NUL
  memcpy(v->bytes, file, n);
  free(file);
  if (n == 0) die_input(path, "empty file (a vocabulary has one token per line)");
  if (n >= INT32_MAX) die_input(path, "%zu bytes: larger than any vocabulary (2 GiB at most)", n);
  size_t lines = 1;
  for (size_t i = 0; i < n; i++) lines += v->bytes[i] == '\n';
  v->offset = xmalloc(lines * sizeof *v->offset);
  v->n_bytes = xmalloc(lines * sizeof *v->n_bytes);
  for (v->n_slots = 1024; v->n_slots < 2 * (int64_t)lines;) v->n_slots *= 2;  // at most half full
  v->slots = xmalloc((size_t)v->n_slots * sizeof *v->slots);
  memset(v->slots, 0xff, (size_t)v->n_slots * sizeof *v->slots);
  int64_t line = 0;
  for (size_t at = 0; at < n;) {
    char *eol = memchr(v->bytes + at, '\n', n - at);
    size_t len = eol ? (size_t)(eol - (v->bytes + at)) : n - at, next = at + len + 1;
    while (len && strchr(" \t\r", v->bytes[at + len - 1])) len--;
    if (eol) *eol = 0;
    v->bytes[at + len] = 0;  // within the line, or on its newline
    vocab_add(v, path, ++line, at, len);
    at = next;
  }
  v->special = (WpSpecialIds){special_id(v, path, "[UNK]"), special_id(v, path, "[CLS]"),
                              special_id(v, path, "[SEP]"), special_id(v, path, "[PAD]")};
  return v;
}

// ---------------------------------------------------------------- characters

// The CJK ideographs split into words of their own: Unified Ideographs,
// Extensions A-F and the two Compatibility blocks, as the reference has them
// but for U+2B820..U+2B91F (the start of Extension E), which Hugging Face
// leaves out and so does this.
static const int32_t CJK_RANGES[][2] = {
    {0x4E00, 0x9FFF},   {0x3400, 0x4DBF},   {0x20000, 0x2A6DF}, {0x2A700, 0x2B73F},
    {0x2B740, 0x2B81F}, {0x2B920, 0x2CEAF}, {0xF900, 0xFAFF},   {0x2F800, 0x2FA1F},
};

static bool is_cjk(int32_t cp) {
  for (size_t i = 0; i < sizeof CJK_RANGES / sizeof CJK_RANGES[0]; i++)
    if (cp >= CJK_RANGES[i][0] && cp <= CJK_RANGES[i][1]) return true;
  return false;
}

// Tab, newline and carriage return are controls to Unicode, whitespace here.
static bool is_ascii_space(int32_t cp) { return cp == '\t' || cp == '\n' || cp == '\r'; }

static bool is_control(int32_t cp) {
  if (is_ascii_space(cp)) return false;
  utf8proc_category_t c = utf8proc_category(cp);  // not unassigned Cn: it may be assigned later
  return c == UTF8PROC_CATEGORY_CC || c == UTF8PROC_CATEGORY_CF || c == UTF8PROC_CATEGORY_CO ||
         c == UTF8PROC_CATEGORY_CS;
}

static bool is_whitespace(int32_t cp) {
  utf8proc_category_t c = utf8proc_category(cp);
  return is_ascii_space(cp) || c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL ||
         c == UTF8PROC_CATEGORY_ZP;
}

static bool is_punct(int32_t cp) {
  bool ascii = (cp >= 33 && cp <= 47) || (cp >= 58 && cp <= 64) || (cp >= 91 && cp <= 96) ||
               (cp >= 123 && cp <= 126);  // $, +, <, =, >, ^, `, |, ~ too: symbols to Unicode
  return ascii || utf8proc_category_string(cp)[0] == 'P';
}

// ---------------------------------------------------------------- words

// A normalised character and the bytes of the original one it came from.
typedef struct WpChar {
  int32_t cp;
  int32_t start, end;
  uint8_t combining_class;
} WpChar;

typedef struct Tokenizer {
  const WpVocab *v;
  WpToken *out;
  int64_t cap, n_out;
  WpChar word[WP_MAX_WORD_CHARS + 1];  // the current word's first characters
  int64_t n_chars;    // the current word's characters (may exceed what word holds)
  int64_t run_start;  // where its run of combining characters (class > 0) starts
  int32_t word_start, word_end;
} Tokenizer;

static void emit(Tokenizer *t, int32_t id, int32_t start, int32_t end) {
  if (t->n_out < t->cap) t->out[t->n_out] = (WpToken){id, start, end};
  t->n_out++;
}

// Appends a normalised character to the current word. NFD puts each run of
// combining characters in order of their class (stable); the run's marks
// are dropped, the rest of it (a few spacing marks) is ordered here.
static void word_add(Tokenizer *t, int32_t cp, uint8_t combining_class, int32_t start, int32_t end) {
  if (t->n_chars == 0 || start < t->word_start) t->word_start = start;
  if (t->n_chars == 0 || end > t->word_end) t->word_end = end;
  if (t->n_chars <= WP_MAX_WORD_CHARS) {
    int64_t at = t->n_chars;
    for (; combining_class && at > t->run_start && t->word[at - 1].combining_class > combining_class; at--)
      t->word[at] = t->word[at - 1];
    t->word[at] = (WpChar){cp, start, end, combining_class};
  }
  t->n_chars++;
  if (!combining_class) t->run_start = t->n_chars;
}

// The bytes [start, end) of the original text that characters [first, last)
// of the word came from.
static void chars_span(const Tokenizer *t, int64_t first, int64_t last, int32_t *start, int32_t *end) {
  *start = t->word[first].start;
  *end = t->word[first].end;
  for (int64_t i = first + 1; i < last; i++) {
    if (t->word[i].start < *start) *start = t->word[i].start;
    if (t->word[i].end > *end) *end = t->word[i].end;
  }
}

// WordPiece: at each character the longest vocabulary entry that prefixes
// the rest of the word ("##" before it after the first piece); a place where
// none does makes the whole word one [UNK].
static void word_pieces(Tokenizer *t) {
  uint8_t utf8[4 * WP_MAX_WORD_CHARS];
  int32_t byte_at[WP_MAX_WORD_CHARS + 1] = {0};  // where character i starts in utf8
  int64_t n = t->n_chars, first_token = t->n_out;
  for (int64_t i = 0; i < n; i++)
    byte_at[i + 1] = byte_at[i] + (int32_t)utf8proc_encode_char(t->word[i].cp, utf8 + byte_at[i]);
  char piece[MAX_PIECE_BYTES] = "##";
  for (int64_t start = 0, end; start < n; start = end) {
    size_t skip = start ? 0 : 2;  // the first piece has no "##"
    memcpy(piece + 2, utf8 + byte_at[start], (size_t)(byte_at[n] - byte_at[start]));
    int32_t id = -1;
    for (end = n < start + t->v->max_chars ? n : start + t->v->max_chars; end > start; end--) {
      id = wp_vocab_id(t->v, piece + skip, 2 - skip + (size_t)(byte_at[end] - byte_at[start]));
      if (id >= 0) break;
    }
    if (id < 0) {
      t->n_out = first_token;
      emit(t, t->v->special.unk, t->word_start, t->word_end);
      return;
    }
    int32_t s, e;
    chars_span(t, start, end, &s, &e);
    emit(t, id, s, e);
  }
}

static void word_finish(Tokenizer *t) {
  if (t->n_chars > WP_MAX_WORD_CHARS) emit(t, t->v->special.unk, t->word_start, t->word_end);
  else if (t->n_chars > 0) word_pieces(t);
  t->n_chars = 0;
  t->run_start = 0;
}

// Steps 1-4 of wordpiece.h for one character of the text at bytes [start, end).
static void feed_char(Tokenizer *t, int32_t cp, int32_t start, int32_t end) {
  if (cp == 0 || cp == REPLACEMENT_CHAR || is_control(cp)) return;
  if (is_whitespace(cp)) {
    word_finish(t);
    return;
  }
  bool cjk = is_cjk(cp);
  if (cjk) word_finish(t);
  utf8proc_int32_t nfd[MAX_DECOMPOSED];
  int boundclass = 0;
  utf8proc_ssize_t n = utf8proc_decompose_char(cp, nfd, MAX_DECOMPOSED, UTF8PROC_DECOMPOSE, &boundclass);
  if (n < 0 || n > MAX_DECOMPOSED) DIE("wordpiece: U+%04X decomposes to %zd code points", (unsigned)cp, n);
  for (utf8proc_ssize_t i = 0; i < n; i++) {
    const utf8proc_property_t *p = utf8proc_get_property(nfd[i]);
    if (p->category == UTF8PROC_CATEGORY_MN) {
      if (!p->combining_class) t->run_start = t->n_chars;
      continue;
    }
    int32_t c = utf8proc_tolower(nfd[i]);  // no decomposition of non-whitespace holds whitespace
    bool punct = is_punct(c);
    if (punct) word_finish(t);
    word_add(t, c, (uint8_t)p->combining_class, start, end);
    if (punct) word_finish(t);
  }
  if (cjk) word_finish(t);
}

int64_t wp_tokenize(const WpVocab *v, const char *text, size_t n_bytes, WpToken *out, int64_t cap) {
  if (n_bytes >= INT32_MAX) die_input("wp_tokenize", "a text of %zu bytes (2 GiB at most)", n_bytes);
  Tokenizer t = {.v = v, .out = out, .cap = cap};
  for (size_t at = 0; at < n_bytes;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const uint8_t *)text + at, (utf8proc_ssize_t)(n_bytes - at), &cp);
    if (k <= 0) cp = REPLACEMENT_CHAR, k = 1;
    feed_char(&t, cp, (int32_t)at, (int32_t)(at + (size_t)k));
    at += (size_t)k;
  }
  word_finish(&t);
  return t.n_out;
}
