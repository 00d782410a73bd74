// subword.c: the subword tokeniser of subword.h. The rules are those of the
// MLPerf Transformer reference's tokenizer (itself tensor2tensor's
// SubwordTextEncoder); where the two differ this follows the MLPerf one:
// reserved entries are plain '<pad>', '<EOS>' (not escaped), and the alphabet
// holds the characters of the reserved entries as well.
#include "translation/subword.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "core/check.h"
#include "core/file.h"

static const char *const RESERVED[2] = {"<pad>", "<EOS>"};
// Characters an escaped token may hold whatever the text: the escapes' own.
static const char ESCAPE_CHARS[] = "\\_u;0123456789";
// What a "\<decimal>;" escape of no valid code point decodes to (the
// reference's choice, U+3013 GETA MARK).
enum { UNDEFINED_CHAR = 0x3013, MAX_CHAR = 0x10FFFF };
// An escaped character takes at most 9 characters ("\1114111;"), each one
// byte; a raw character up to 4 bytes.
enum { ESCAPED_PER_CHAR = 9 };
// Candidate min_count range of the size search (the reference's).
enum { MIN_MIN_COUNT = 1, MAX_MIN_COUNT = 1000, BUILD_ITERATIONS = 4 };

// ---------------------------------------------------------------- characters

static bool is_alnum(int32_t cp) {
  utf8proc_category_t c = utf8proc_category(cp);
  return (c >= UTF8PROC_CATEGORY_LU && c <= UTF8PROC_CATEGORY_LO) ||
         (c >= UTF8PROC_CATEGORY_ND && c <= UTF8PROC_CATEGORY_NO);
}

// The code point at text[0..n) and its length in bytes; the text is valid
// UTF-8 by the callers' contract, so a bad byte is a broken invariant.
static int32_t next_char(const char *text, size_t n, size_t *len) {
  utf8proc_int32_t cp;
  utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text, (utf8proc_ssize_t)n, &cp);
  if (k <= 0) DIE("subword: invalid UTF-8 reached the tokeniser (callers check their text)");
  *len = (size_t)k;
  return cp;
}

int64_t subword_invalid_utf8(const char *text, size_t n_bytes) {
  for (size_t i = 0; i < n_bytes;) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)text + i,
                                          (utf8proc_ssize_t)(n_bytes - i), &cp);
    if (k <= 0) return (int64_t)i;
    i += (size_t)k;
  }
  return -1;
}

static size_t count_chars(const char *s, size_t n_bytes) {
  size_t n = 0;
  for (size_t i = 0; i < n_bytes; i++) n += ((uint8_t)s[i] & 0xC0) != 0x80;
  return n;
}

// A set of code points: one bit each, 136 KiB, so that membership costs one
// load whatever the script of the text.
typedef struct CharSet {
  uint8_t *bits;
} CharSet;

static CharSet charset_new(void) { return (CharSet){xcalloc(MAX_CHAR / 8 + 1, 1)}; }
static bool charset_has(CharSet s, int32_t cp) { return s.bits[cp >> 3] >> (cp & 7) & 1; }
static void charset_add(CharSet s, int32_t cp) { s.bits[cp >> 3] |= (uint8_t)(1u << (cp & 7)); }

static void charset_add_text(CharSet s, const char *text, size_t n_bytes) {
  for (size_t i = 0, k; i < n_bytes; i += k) charset_add(s, next_char(text + i, n_bytes - i, &k));
}

// ---------------------------------------------------------------- string map

// Byte strings -> item index (insertion order) with an int64 value each:
// the vocabulary (item = id), and the builder's token and candidate counts.
typedef struct StrMap {
  char *keys;          // every key NUL-terminated, in insertion order
  size_t keys_bytes, keys_capacity;
  size_t *key_offset;  // (count) where item i's key starts in keys
  int32_t *key_bytes;  // (count)
  int64_t *value;      // (count)
  int64_t count, item_capacity;
  int64_t *slots;      // (n_slots) item index or -1; n_slots a power of 2
  int64_t n_slots;
} StrMap;

static uint64_t hash_bytes(const char *s, size_t n) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static const char *strmap_key(const StrMap *m, int64_t item) { return m->keys + m->key_offset[item]; }

// The slot holding key, or the empty slot where it would go.
static int64_t strmap_slot(const StrMap *m, const char *key, size_t n) {
  int64_t mask = m->n_slots - 1;
  for (int64_t s = (int64_t)(hash_bytes(key, n) & (uint64_t)mask);; s = (s + 1) & mask) {
    int64_t item = m->slots[s];
    if (item < 0 || ((size_t)m->key_bytes[item] == n && memcmp(strmap_key(m, item), key, n) == 0))
      return s;
  }
}

static int64_t strmap_find(const StrMap *m, const char *key, size_t n) {
  return m->n_slots ? m->slots[strmap_slot(m, key, n)] : -1;
}

// Keeps the table at most half full, so that probe runs stay short.
static void strmap_grow_slots(StrMap *m) {
  free(m->slots);
  m->n_slots = m->n_slots ? 2 * m->n_slots : 1024;
  m->slots = xmalloc((size_t)m->n_slots * sizeof *m->slots);
  memset(m->slots, 0xff, (size_t)m->n_slots * sizeof *m->slots);
  for (int64_t i = 0; i < m->count; i++)
    m->slots[strmap_slot(m, strmap_key(m, i), (size_t)m->key_bytes[i])] = i;
}

static void *grow_array(void *a, int64_t capacity, size_t elem_bytes) {
  void *b = realloc(a, (size_t)capacity * elem_bytes);
  if (!b) DIE("subword: out of memory (%lld items)", (long long)capacity);
  return b;
}

static void strmap_append_key(StrMap *m, const char *key, size_t n) {
  if (m->count == m->item_capacity) {
    m->item_capacity = m->item_capacity ? 2 * m->item_capacity : 1024;
    m->key_offset = grow_array(m->key_offset, m->item_capacity, sizeof *m->key_offset);
    m->key_bytes = grow_array(m->key_bytes, m->item_capacity, sizeof *m->key_bytes);
    m->value = grow_array(m->value, m->item_capacity, sizeof *m->value);
  }
  while (m->keys_bytes + n + 1 > m->keys_capacity) {
    m->keys_capacity = m->keys_capacity ? 2 * m->keys_capacity : 65536;
    m->keys = grow_array(m->keys, (int64_t)m->keys_capacity, 1);
  }
  memcpy(m->keys + m->keys_bytes, key, n);
  m->keys[m->keys_bytes + n] = 0;
  m->key_offset[m->count] = m->keys_bytes;
  m->key_bytes[m->count] = (int32_t)n;
  m->value[m->count] = 0;
  m->keys_bytes += n + 1;
  m->count++;
}

// The item of key, added (value 0) when new; *added says which.
static int64_t strmap_add(StrMap *m, const char *key, size_t n, bool *added) {
  if (2 * (m->count + 1) > m->n_slots) strmap_grow_slots(m);
  int64_t s = strmap_slot(m, key, n);
  *added = m->slots[s] < 0;
  if (*added) {
    strmap_append_key(m, key, n);
    m->slots[s] = m->count - 1;
  }
  return m->slots[s];
}

static void strmap_free(StrMap *m) {
  free(m->keys);
  free(m->key_offset);
  free(m->key_bytes);
  free(m->value);
  free(m->slots);
  *m = (StrMap){0};
}

// ---------------------------------------------------------------- vocabulary

struct Subword {
  StrMap entries;     // item index = id
  int32_t max_chars;  // longest entry, in code points
  CharSet alphabet;   // characters of the entries and of the escapes
};

static Subword *subword_new(void) { return xcalloc(1, sizeof(Subword)); }

// The id of the new entry, or -1 when it is already there.
static int32_t subword_add(Subword *sw, const char *entry, size_t n) {
  bool added;
  int64_t id = strmap_add(&sw->entries, entry, n, &added);
  return added ? (int32_t)id : -1;
}

// Sets the alphabet and the longest entry once every entry is in. Returns a
// character of the alphabet with no entry of its own (which text holding it
// could not be encoded with), or -1; *where is an entry holding it, -1 for an
// escape character.
static int32_t subword_finish(Subword *sw, int32_t *where) {
  sw->alphabet = charset_new();
  charset_add_text(sw->alphabet, ESCAPE_CHARS, strlen(ESCAPE_CHARS));
  for (int32_t id = 0; id < subword_size(sw); id++) {
    const char *e = subword_entry(sw, id);
    size_t n = (size_t)sw->entries.key_bytes[id], chars = count_chars(e, n);
    if ((int32_t)chars > sw->max_chars) sw->max_chars = (int32_t)chars;
    charset_add_text(sw->alphabet, e, n);
  }
  for (int32_t id = -1; id < subword_size(sw); id++) {
    const char *e = id < 0 ? ESCAPE_CHARS : subword_entry(sw, id);
    size_t n = id < 0 ? strlen(ESCAPE_CHARS) : (size_t)sw->entries.key_bytes[id];
    for (size_t i = 0, k; i < n; i += k) {
      int32_t cp = next_char(e + i, n - i, &k);
      if (strmap_find(&sw->entries, e + i, k) < 0) {
        *where = id;
        return cp;
      }
    }
  }
  return -1;
}

int32_t subword_size(const Subword *sw) { return (int32_t)sw->entries.count; }

const char *subword_entry(const Subword *sw, int32_t id) { return strmap_key(&sw->entries, id); }

void subword_free(Subword *sw) {
  if (!sw) return;
  strmap_free(&sw->entries);
  free(sw->alphabet.bits);
  free(sw);
}

// ---------------------------------------------------------------- tokens

// Text -> tokens: maximal runs of alphanumeric characters or of the rest. A
// token that is a single space is dropped unless it starts or ends the text
// (decoding puts a space back between two alphanumeric tokens only).
typedef struct TokenIter {
  const char *text;
  size_t n_bytes, pos;
} TokenIter;

static bool token_next(TokenIter *it, size_t *start, size_t *n_bytes) {
  while (it->pos < it->n_bytes) {
    size_t s = it->pos, k;
    bool alnum = is_alnum(next_char(it->text + s, it->n_bytes - s, &k));
    it->pos += k;
    while (it->pos < it->n_bytes) {
      int32_t cp = next_char(it->text + it->pos, it->n_bytes - it->pos, &k);
      if (is_alnum(cp) != alnum) break;
      it->pos += k;
    }
    bool lone_space = it->pos == s + 1 && it->text[s] == ' ';
    if (lone_space && s > 0 && it->pos < it->n_bytes) continue;
    *start = s;
    *n_bytes = it->pos - s;
    return true;
  }
  return false;
}

// A token escaped: "\" -> "\\", "_" -> "\u", a character outside the
// alphabet (and newline, always) -> "\<decimal>;", then the closing "_".
// offset[i] is where escaped character i starts; offset[n_chars] = n_bytes.
typedef struct Escaped {
  char *bytes;
  int32_t *offset;
  int64_t n_chars;
} Escaped;

// Appends one escaped character of n bytes.
static void escaped_put(Escaped *e, size_t *at, const char *s, size_t n) {
  e->offset[e->n_chars++] = (int32_t)*at;
  memcpy(e->bytes + *at, s, n);
  *at += n;
}

static void escaped_put_ascii(Escaped *e, size_t *at, const char *s) {
  for (; *s; s++) escaped_put(e, at, s, 1);
}

static void escape_token(CharSet alphabet, const char *token, size_t n_bytes, Escaped *e) {
  size_t at = 0;
  e->n_chars = 0;
  for (size_t i = 0, k; i < n_bytes; i += k) {
    int32_t cp = next_char(token + i, n_bytes - i, &k);
    char esc[16];
    if (cp == '\\' || cp == '_') {
      escaped_put_ascii(e, &at, cp == '\\' ? "\\\\" : "\\u");
    } else if (cp != '\n' && charset_has(alphabet, cp)) {
      escaped_put(e, &at, token + i, k);
    } else {
      snprintf(esc, sizeof esc, "\\%d;", (int)cp);
      escaped_put_ascii(e, &at, esc);
    }
  }
  escaped_put_ascii(e, &at, "_");
  e->offset[e->n_chars] = (int32_t)at;
}

// Room to escape a token of n_bytes: on the stack for ordinary tokens, on
// the heap (freed by escaped_release) for a long one, such as a line of
// dashes.
enum { ESCAPED_STACK_BYTES = 4096 };
typedef struct EscapedRoom {
  char bytes[ESCAPED_STACK_BYTES];
  int32_t offset[ESCAPED_STACK_BYTES + 1];
} EscapedRoom;

static Escaped escaped_for(EscapedRoom *room, size_t n_bytes) {
  size_t need = ESCAPED_PER_CHAR * n_bytes + 1;
  if (need <= ESCAPED_STACK_BYTES) return (Escaped){room->bytes, room->offset, 0};
  return (Escaped){xmalloc(need), xmalloc((need + 1) * sizeof(int32_t)), 0};
}

static void escaped_release(EscapedRoom *room, Escaped *e) {
  if (e->bytes == room->bytes) return;
  free(e->bytes);
  free(e->offset);
}

// The longest entry that prefixes the escaped token at character start: its
// end (a character index) and *id.
static int64_t longest_match(const Subword *sw, const Escaped *e, int64_t start, int32_t *id) {
  int64_t last = e->n_chars < start + sw->max_chars ? e->n_chars : start + sw->max_chars;
  for (int64_t end = last; end > start; end--) {
    int64_t found = strmap_find(&sw->entries, e->bytes + e->offset[start],
                                (size_t)(e->offset[end] - e->offset[start]));
    if (found >= 0) {
      *id = (int32_t)found;
      return end;
    }
  }
  // Every character of the alphabet has an entry of its own (checked at load
  // and built in), and the escaped token holds only those.
  DIE("subword: no entry matches '%s' at character %lld", e->bytes, (long long)start);
}

int64_t subword_encode(const Subword *sw, const char *text, size_t n_bytes, int32_t *ids,
                       int64_t max_ids) {
  EscapedRoom room;
  TokenIter it = {text, n_bytes, 0};
  int64_t n = 0;
  size_t start, len;
  while (token_next(&it, &start, &len)) {
    Escaped e = escaped_for(&room, len);
    escape_token(sw->alphabet, text + start, len, &e);
    for (int64_t c = 0; c < e.n_chars; n++) {
      int32_t id;
      c = longest_match(sw, &e, c, &id);
      if (n < max_ids) ids[n] = id;
    }
    escaped_release(&room, &e);
  }
  return n;
}

// ---------------------------------------------------------------- decoding

// The characters of the entries of ids one after another, pad, EOS and ids
// outside the vocabulary skipped.
typedef struct IdCursor {
  const Subword *sw;
  const int32_t *ids;
  int64_t n, k;
  size_t at;  // byte in entry ids[k]
} IdCursor;

enum { CURSOR_END = -2, TOKEN_END = -1 };

static int32_t cursor_next(IdCursor *c) {
  for (; c->k < c->n; c->k++, c->at = 0) {
    int32_t id = c->ids[c->k];
    if (id <= SUBWORD_EOS || id >= subword_size(c->sw)) continue;
    size_t n = (size_t)c->sw->entries.key_bytes[id];
    if (c->at == n) continue;
    size_t k;
    int32_t cp = next_char(subword_entry(c->sw, id) + c->at, n - c->at, &k);
    c->at += k;
    return cp;
  }
  return CURSOR_END;
}

// A "\<digits>;" escape after its backslash: the character, or -1 when the
// digits are not closed by ";" (then the backslash stands for itself).
static int32_t unescape_number(IdCursor *c, int32_t first_digit) {
  int64_t value = first_digit - '0';
  for (;;) {
    int32_t cp = cursor_next(c);
    if (cp == ';') break;
    if (cp < '0' || cp > '9') return -1;
    value = value > MAX_CHAR ? value : 10 * value + (cp - '0');
  }
  bool surrogate = value >= 0xD800 && value <= 0xDFFF;
  return value > MAX_CHAR || surrogate ? UNDEFINED_CHAR : (int32_t)value;
}

// The next character of the current token, unescaped; TOKEN_END after its
// "_", CURSOR_END after the last id.
static int32_t unescape_next(IdCursor *c) {
  int32_t cp = cursor_next(c);
  if (cp == '_') return TOKEN_END;
  if (cp != '\\') return cp;
  IdCursor after_backslash = *c;
  int32_t x = cursor_next(c);
  if (x == 'u') return '_';
  if (x == '\\') return '\\';
  int32_t number = x >= '0' && x <= '9' ? unescape_number(c, x) : -1;
  if (number >= 0) return number;
  *c = after_backslash;
  return '\\';
}

typedef struct TextOut {
  char *out;
  size_t capacity, n_bytes, written;
  bool full;  // a character did not fit: the rest is counted, not written
} TextOut;

static void text_put(TextOut *t, int32_t cp) {
  utf8proc_uint8_t buf[4];
  size_t k = (size_t)utf8proc_encode_char(cp, buf);
  t->full = t->full || t->written + k >= t->capacity;
  if (!t->full) {
    memcpy(t->out + t->written, buf, k);
    t->written += k;
  }
  t->n_bytes += k;
}

size_t subword_decode(const Subword *sw, const int32_t *ids, int64_t n, char *out,
                      size_t out_bytes) {
  IdCursor c = {sw, ids, n, 0, 0};
  TextOut t = {out, out_bytes, 0, 0, out_bytes == 0};
  bool first = true, prev_alnum = false;
  for (;;) {
    int32_t cp = unescape_next(&c);
    if (cp == CURSOR_END) break;
    if (cp == TOKEN_END) continue;  // "__": an empty token, as the reference skips
    bool alnum = is_alnum(cp);
    if (!first && prev_alnum && alnum) text_put(&t, ' ');
    first = false;
    prev_alnum = alnum;
    for (; cp >= 0; cp = unescape_next(&c)) text_put(&t, cp);
    if (cp == CURSOR_END) break;
  }
  if (out_bytes) out[t.written] = 0;
  return t.n_bytes;
}

// ---------------------------------------------------------------- files

static bool is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }

// One line of a vocabulary file, surrounding whitespace stripped: its entry
// between the single quotes.
static Subword *load_entry(Subword *sw, const char *path, int64_t line, const char *s, size_t n) {
  char where[4200];
  snprintf(where, sizeof where, "%s:%lld", path, (long long)line);
  while (n && is_space(s[n - 1])) n--;
  while (n && is_space(s[0])) s++, n--;
  if (n < 2 || s[0] != '\'' || s[n - 1] != '\'')
    die_input(where, "expected an entry in single quotes, as 'the_'");
  if (n == 2) die_input(where, "empty entry ''");
  int64_t bad = subword_invalid_utf8(s + 1, n - 2);
  if (bad >= 0) die_input(where, "invalid UTF-8 at byte %lld of the entry", (long long)bad);
  if (memchr(s + 1, 0, n - 2)) die_input(where, "NUL byte in the entry");
  if (subword_add(sw, s + 1, n - 2) < 0) {
    int64_t first = strmap_find(&sw->entries, s + 1, n - 2) + 1;
    die_input(where, "entry '%.*s' repeats line %lld", (int)(n - 2), s + 1, (long long)first);
  }
  return sw;
}

static void check_reserved(const Subword *sw, const char *path) {
  if (subword_size(sw) < 2)
    die_input(path, "%d entries; a vocabulary starts with '<pad>' and '<EOS>'", subword_size(sw));
  for (int32_t id = 0; id < 2; id++) {
    if (strcmp(subword_entry(sw, id), RESERVED[id]) == 0) continue;
    char where[4200];
    snprintf(where, sizeof where, "%s:%d", path, id + 1);
    die_input(where, "'%s' where '%s' must be (ids 0 and 1 are <pad> and <EOS>)",
              subword_entry(sw, id), RESERVED[id]);
  }
}

Subword *subword_load(const char *path) {
  size_t n;
  char *bytes = (char *)file_read(path, &n);
  Subword *sw = subword_new();
  int64_t line = 0;
  for (size_t at = 0; at < n;) {
    const char *eol = memchr(bytes + at, '\n', n - at);
    size_t len = eol ? (size_t)(eol - (bytes + at)) : n - at;
    load_entry(sw, path, ++line, bytes + at, len);
    at += len + 1;
  }
  free(bytes);
  check_reserved(sw, path);
  int32_t where, missing = subword_finish(sw, &where);
  if (missing >= 0) {
    utf8proc_uint8_t ch[5] = {0};
    utf8proc_encode_char(missing, ch);
    char name[4200];
    snprintf(name, sizeof name, "%s:%d", path, where + 1);
    die_input(where < 0 ? path : name,
              "character '%s' (U+%04X) has no entry of its own, so text holding it cannot be "
              "encoded", (const char *)ch, (unsigned)missing);
  }
  return sw;
}

void subword_save(const Subword *sw, const char *path) {
  AtomicFile f;
  atomic_file_begin(&f, path);
  for (int32_t id = 0; id < subword_size(sw); id++) atomic_file_printf(&f, "'%s'\n", subword_entry(sw, id));
  atomic_file_commit(&f);
}

// ---------------------------------------------------------------- building

struct SubwordCounts {
  StrMap tokens;  // value: how often the token occurs
};

SubwordCounts *subword_counts_new(void) { return xcalloc(1, sizeof(SubwordCounts)); }

void subword_counts_add(SubwordCounts *c, const char *text, size_t n_bytes) {
  TokenIter it = {text, n_bytes, 0};
  size_t start, len;
  bool added;
  while (token_next(&it, &start, &len)) {
    int64_t item = strmap_add(&c->tokens, text + start, len, &added);  // may move value
    c->tokens.value[item]++;
  }
}

void subword_counts_free(SubwordCounts *c) {
  if (!c) return;
  strmap_free(&c->tokens);
  free(c);
}

// What every vocabulary built from the counts starts from: the alphabet
// (characters of the tokens, of the reserved entries and of the escapes) as
// single-character entries after the reserved ones.
typedef struct Builder {
  const StrMap *tokens;
  CharSet alphabet;
  StrMap chars;  // the alphabet's characters as UTF-8, item order = first seen
} Builder;

static void builder_add_chars(Builder *b, const char *text, size_t n_bytes) {
  bool added;
  for (size_t i = 0, k; i < n_bytes; i += k) {
    charset_add(b->alphabet, next_char(text + i, n_bytes - i, &k));
    strmap_add(&b->chars, text + i, k, &added);
  }
}

// Counts, for each token, every substring that starts where a subword of
// its segmentation by sw starts, weighted by the token's count.
static void count_candidates(const Builder *b, const Subword *sw, StrMap *counts) {
  EscapedRoom room;
  bool added;
  for (int64_t t = 0; t < b->tokens->count; t++) {
    size_t len = (size_t)b->tokens->key_bytes[t];
    Escaped e = escaped_for(&room, len);
    escape_token(b->alphabet, strmap_key(b->tokens, t), len, &e);
    for (int64_t start = 0, next; start < e.n_chars; start = next) {
      int32_t id;
      next = longest_match(sw, &e, start, &id);
      for (int64_t end = start + 1; end <= e.n_chars; end++) {
        const char *s = e.bytes + e.offset[start];
        size_t n = (size_t)(e.offset[end] - e.offset[start]);
        int64_t item = strmap_add(counts, s, n, &added);  // may move value
        counts->value[item] += b->tokens->value[t];
      }
    }
    escaped_release(&room, &e);
  }
}

typedef struct Candidate {
  int64_t count, item;
  const StrMap *map;
  int32_t n_chars;
} Candidate;

static int by_length_down(const void *pa, const void *pb) {
  const Candidate *a = pa, *b = pb;
  return (a->n_chars < b->n_chars) - (a->n_chars > b->n_chars);
}

// Count down, then text down (code point order, which UTF-8 bytes keep):
// the order of the reference's sort of (count, subtoken) pairs, reversed.
static int by_count_down(const void *pa, const void *pb) {
  const Candidate *a = pa, *b = pb;
  if (a->count != b->count) return a->count < b->count ? 1 : -1;
  size_t na = (size_t)a->map->key_bytes[a->item], nb = (size_t)b->map->key_bytes[b->item];
  int c = memcmp(strmap_key(a->map, a->item), strmap_key(b->map, b->item), na < nb ? na : nb);
  if (c == 0) c = (na > nb) - (na < nb);
  return -c;
}

static bool is_reserved(const char *s, size_t n) {
  for (int i = 0; i < 2; i++)
    if (strlen(RESERVED[i]) == n && memcmp(RESERVED[i], s, n) == 0) return true;
  return false;
}

// The next vocabulary from the candidate counts: candidates of at least
// min_count, longest first, each taking its count away from its prefixes
// (a longer subword wins over its prefixes); then the alphabet; sorted by
// count. The entries in order go to *out (malloc'd); returns their number.
static int64_t select_candidates(const Builder *b, StrMap *counts, int64_t min_count,
                                 Candidate **out) {
  Candidate *kept = xmalloc((size_t)(counts->count + b->chars.count + 1) * sizeof *kept);
  int64_t n_kept = 0, n_out = 0;
  for (int64_t i = 0; i < counts->count; i++) {
    if (counts->value[i] < min_count) continue;
    size_t n = (size_t)counts->key_bytes[i];
    kept[n_kept++] = (Candidate){0, i, counts, (int32_t)count_chars(strmap_key(counts, i), n)};
  }
  qsort(kept, (size_t)n_kept, sizeof *kept, by_length_down);
  for (int64_t i = 0; i < n_kept; i++) {
    int64_t item = kept[i].item, count = counts->value[item];
    const char *s = strmap_key(counts, item);
    size_t n = (size_t)counts->key_bytes[item];
    if (count < min_count) continue;
    if (kept[i].n_chars > 1 && !is_reserved(s, n)) kept[n_out++] = (Candidate){count, item, counts, 0};
    // Proper prefixes, ending on character boundaries.
    for (size_t p = 0, k; next_char(s + p, n - p, &k), p + k < n;) {
      p += k;
      counts->value[strmap_find(counts, s, p)] -= count;
    }
  }
  for (int64_t a = 0; a < b->chars.count; a++) {
    int64_t item = strmap_find(counts, strmap_key(&b->chars, a), (size_t)b->chars.key_bytes[a]);
    int64_t count = item >= 0 ? counts->value[item] : 0;
    kept[n_out++] = (Candidate){count, a, &b->chars, 0};
  }
  qsort(kept, (size_t)n_out, sizeof *kept, by_count_down);
  *out = kept;
  return n_out;
}

static Subword *vocab_of_candidates(const Candidate *c, int64_t n) {
  Subword *sw = subword_new();
  for (int i = 0; i < 2; i++) subword_add(sw, RESERVED[i], strlen(RESERVED[i]));
  for (int64_t i = 0; i < n; i++) {
    const StrMap *m = c[i].map;
    if (subword_add(sw, strmap_key(m, c[i].item), (size_t)m->key_bytes[c[i].item]) < 0)
      DIE("subword_build: '%s' twice", strmap_key(m, c[i].item));
  }
  int32_t where;
  if (subword_finish(sw, &where) >= 0) DIE("subword_build: a character lacks its entry");
  return sw;
}

// The reference's vocabulary for one min_count: four rounds of segmenting
// every token with the last vocabulary and keeping the frequent candidates.
static Subword *build_for_min_count(const Builder *b, int64_t min_count) {
  Candidate *alphabet = xmalloc((size_t)b->chars.count * sizeof *alphabet);
  for (int64_t a = 0; a < b->chars.count; a++) alphabet[a] = (Candidate){0, a, &b->chars, 1};
  Subword *sw = vocab_of_candidates(alphabet, b->chars.count);
  free(alphabet);
  for (int round = 0; round < BUILD_ITERATIONS; round++) {
    StrMap counts = {0};
    count_candidates(b, sw, &counts);
    Candidate *c;
    int64_t n = select_candidates(b, &counts, min_count, &c);
    subword_free(sw);
    sw = vocab_of_candidates(c, n);
    free(c);
    strmap_free(&counts);
  }
  return sw;
}

static int64_t distance(const Subword *sw, int32_t target) {
  int64_t d = (int64_t)subword_size(sw) - target;
  return d < 0 ? -d : d;
}

// The reference's search: halve [lo, hi] towards the target size, stop
// within 1% of it, keep the closest vocabulary seen on the way back.
static Subword *bisect(const Builder *b, int64_t lo, int64_t hi, int32_t target) {
  int64_t mid = (lo + hi) / 2;
  Subword *sw = build_for_min_count(b, mid);
  if (distance(sw, target) * 100 < target || lo >= hi || mid < 2) return sw;
  Subword *other = subword_size(sw) > target ? bisect(b, mid + 1, hi, target)
                                              : bisect(b, lo, mid - 1, target);
  if (distance(other, target) < distance(sw, target)) {
    subword_free(sw);
    return other;
  }
  subword_free(other);
  return sw;
}

Subword *subword_build(const SubwordCounts *c, int32_t target_size) {
  Builder b = {&c->tokens, charset_new(), {0}};
  for (int64_t t = 0; t < c->tokens.count; t++)
    builder_add_chars(&b, strmap_key(&c->tokens, t), (size_t)c->tokens.key_bytes[t]);
  for (int i = 0; i < 2; i++) builder_add_chars(&b, RESERVED[i], strlen(RESERVED[i]));
  builder_add_chars(&b, ESCAPE_CHARS, strlen(ESCAPE_CHARS));
  Subword *sw = bisect(&b, MIN_MIN_COUNT, MAX_MIN_COUNT, target_size);
  free(b.alphabet.bits);
  strmap_free(&b.chars);
  return sw;
}
