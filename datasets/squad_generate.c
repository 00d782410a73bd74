// squad_generate: a reading-comprehension data set in the format of SQuAD
// v1.1 (train-v1.1.json, dev-v1.1.json), from the real English of WordNet's
// glosses (Debian wordnet-base), so that the scaled BERT benchmarks go
// through the same converter and evaluation as SQuAD itself:
//   <out>/train-v1.1.json, <out>/dev-v1.1.json
//   {"version": "1.1", "data": [{"title", "paragraphs": [{"context",
//     "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]}
// answer_start counts characters (code points, Python's str index), not
// bytes: contexts hold typographic quotes.
//
// WordNet's data.noun and data.verb hold one synset a line: offset,
// lexicographer file (its topic: noun.animal, verb.motion, ...), its words
// (underscores for spaces), pointers, then " | " and the gloss: a
// definition and examples in double quotes, separated by "; ". A synset is
// kept when its definition has 3..14 words and no double quote, its first
// word (the headword) at most 3 words and only printable ASCII; its other
// words are synonyms, its quoted parts of 3..12 words examples.
//
// --questions=glosses (the default): every paragraph (context) is a topic
// paragraph, its sentences and questions in their first phrasing, and the
// questions of four kinds: for a definition by its word, for a word by its
// definition, for a synonym, for an example.
// --questions=senses (the second set, harder): every phrasing drawn, all the
// kinds below, and half the paragraphs senses paragraphs.
//
// A topic paragraph describes --entries synsets of one lexicographer file,
// with distinct headwords and definitions, one sentence group each, its
// sentences in one of a few phrasings (the second set draws one):
//   “dog” means a member of the genus Canis. It is also called domestic
//   dog or Canis familiaris. For example: “the dog barked all night”.
//   The word “dog” stands for ... Some call it ... As in “...”.
// (synonyms when the synset has them, an example with probability 1/2), and
// asks one question per entry, of a kind drawn among those it allows, each
// in one of three phrasings (the first four kinds, in their first phrasing,
// make the glosses set):
//   What does dog mean? / What is meant by dog?        -> the definition
//   Which word means <definition>?                     -> dog
//   What is another word for dog?                      -> domestic dog
//   How is dog used in a sentence?                     -> the example
//   What does Canis familiaris mean?                   -> the definition
//   The meaning of which word includes "<3-4 of its words>"? -> dog
//   Which word is also called domestic dog?            -> dog
// Two of them take a step: asked by a synonym, the answer is the definition
// or the word of the sentence before.
//
// A senses paragraph (second set) describes --entries senses of one
// headword (synsets of any topic that share it), without their examples:
//   “bank” means sloping land beside a body of water. By “bank” one means
//   a financial institution that accepts deposits ...
// and asks about each sense by its example, which the context does not hold:
//   What does bank mean in "he sat on the bank of the river"? -> its definition
// (a sense without an example is asked "Which word means <definition>?").
// Nothing in the words of the question points at the right definition: the
// reader has to know what the sentence means, which a pretrained encoder
// brings and a randomly initialised one does not.
//
// The answer is always a span of the context. A baseline that answers the
// first sentence of every context scores low on the glosses set
// (language/README.md has the numbers; on the senses set at two entries a
// paragraph any definition is right half the time, and it scores higher). Train questions have one answer; dev questions 1-3 (as SQuAD's
// dev set): a definition also without its leading article and up to its
// first ";", a word also with its quotes, every synonym named, an example
// also with its quotes.
//
// The synsets are shuffled by --seed; dev paragraphs come first, then
// train, so no synset is in both. Articles are the lexicographer files,
// each holding its topic paragraphs, and one of the senses paragraphs.
// Each file is written whole (to a temporary name, then renamed) or not at
// all.
//   squad_generate --out=data/bert/small/raw --train_questions=2000 --dev_questions=300
//   squad_generate --out=DIR --entries=2 --questions=senses   (the candidate harder small set)
#include <cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/file.h"
#include "core/rng.h"
#include "datasets/convert_util.h"

static const ConfigKey KEYS[] = {
    {"out", CFG_STRING, "", "output folder (created; must not hold train-v1.1.json or dev-v1.1.json)", NULL},
    {"wordnet", CFG_STRING, "/usr/share/wordnet", "WordNet's dict folder with data.noun and data.verb (Debian wordnet-base)", NULL},
    {"seed", CFG_INT, "1", "random seed: the same seed gives the same files", "[0, inf)"},
    {"train_questions", CFG_INT, "2000", "questions in train-v1.1.json", "[1, 10000000]"},
    {"dev_questions", CFG_INT, "300", "questions in dev-v1.1.json", "[1, 10000000]"},
    {"entries", CFG_INT, "4", "synsets (and questions) per paragraph", "[2, 8]"},
    {"questions", CFG_STRING, "glosses",
     "glosses: topic paragraphs, four kinds of question in one phrasing each; senses: also paraphrases, "
     "steps through synonyms and paragraphs of one word's senses asked by examples", NULL},
};

// --questions=senses: the second set of questions (phrasings drawn,
// more kinds, senses paragraphs). Off, the generator draws exactly what it
// drew before the second set existed, so --questions=glosses files are the
// same bytes as then.
static bool second_set;

// A phrasing among n: drawn in the second set, else the first.
static uint32_t phrasing(Rng *rng, uint32_t n) { return second_set ? rng_next_below(rng, n) : 0; }

static const char *const kOutputs[] = {"train-v1.1.json", "dev-v1.1.json", NULL};
static const char *const kDataFiles[] = {"data.noun", "data.verb"};

// WordNet's lexicographer files by number (lexnames(5WN)).
static const char *const kLexNames[] = {
    "adj.all", "adj.pert", "adv.all", "noun.Tops", "noun.act", "noun.animal", "noun.artifact",
    "noun.attribute", "noun.body", "noun.cognition", "noun.communication", "noun.event",
    "noun.feeling", "noun.food", "noun.group", "noun.location", "noun.motive", "noun.object",
    "noun.person", "noun.phenomenon", "noun.plant", "noun.possession", "noun.process",
    "noun.quantity", "noun.relation", "noun.shape", "noun.state", "noun.substance", "noun.time",
    "verb.body", "verb.change", "verb.cognition", "verb.communication", "verb.competition",
    "verb.consumption", "verb.contact", "verb.creation", "verb.emotion", "verb.motion",
    "verb.perception", "verb.possession", "verb.social", "verb.stative", "verb.weather",
    "adj.ppl"};
#define N_LEX ((int)(sizeof kLexNames / sizeof kLexNames[0]))
#define MAX_WORDS 3   // headword and at most 2 synonyms
#define OPEN_QUOTE "\xe2\x80\x9c"   // “
#define CLOSE_QUOTE "\xe2\x80\x9d"  // ”

typedef struct Synset {
  int lex;                  // lexicographer file
  char *word[MAX_WORDS];    // headword, synonyms (NULL past the last)
  char *definition;
  char *example;            // NULL: none
} Synset;

typedef struct Synsets {
  Synset *items;
  int64_t count, capacity;
} Synsets;

// ---------------------------------------------------------------- reading WordNet

static int64_t count_words(const char *s, size_t n) {
  int64_t words = 0;
  for (size_t i = 0; i < n; i++) words += s[i] != ' ' && (i == 0 || s[i - 1] == ' ');
  return words;
}

static char *copy_trimmed(const char *s, size_t n) {
  while (n && s[0] == ' ') s++, n--;
  while (n && (s[n - 1] == ' ' || s[n - 1] == ';')) n--;
  char *out = xmalloc(n + 1);
  memcpy(out, s, n);
  out[n] = '\0';
  return out;
}

// A WordNet word: underscores become spaces; NULL unless it is printable
// ASCII without quotes, of at most 3 words.
static char *clean_word(const char *s, size_t n) {
  char *w = copy_trimmed(s, n);
  for (char *c = w; *c; c++) {
    if (*c == '_') *c = ' ';
    if (*c < ' ' || *c > '~' || *c == '"') {
      free(w);
      return NULL;
    }
  }
  if (!*w || count_words(w, strlen(w)) > 3) {
    free(w);
    return NULL;
  }
  return w;
}

// The gloss g: the definition (the parts before the first quoted one) and
// the first example of 3..12 words. False when the definition does not fit.
static bool split_gloss(const char *g, Synset *s) {
  const char *quote = strchr(g, '"');
  size_t def_n = quote ? (size_t)(quote - g) : strlen(g);
  s->definition = copy_trimmed(g, def_n);
  int64_t words = count_words(s->definition, strlen(s->definition));
  if (words < 3 || words > 14) return false;
  s->example = NULL;
  while (quote && !s->example) {
    const char *end = strchr(quote + 1, '"');
    if (!end) break;
    int64_t n = count_words(quote + 1, (size_t)(end - quote - 1));
    if (n >= 3 && n <= 12) s->example = copy_trimmed(quote + 1, (size_t)(end - quote - 1));
    quote = strchr(end + 1, '"');
  }
  return true;
}

static void synset_free(Synset *s) {
  for (int k = 0; k < MAX_WORDS; k++) free(s->word[k]);
  free(s->definition);
  free(s->example);
}

// One data-file line: "offset lex type w_cnt(hex) word lex_id ... | gloss".
static void parse_line(Synsets *all, char *line) {
  char *bar = strstr(line, " | ");
  if (line[0] == ' ' || !bar) return;  // the licence header, or no gloss
  *bar = '\0';
  Synset s = {0};
  char *at, *field[4];
  for (int k = 0; k < 4; k++)
    if (!(field[k] = strtok_r(k ? NULL : line, " ", &at))) return;
  s.lex = (int)strtol(field[1], NULL, 10);
  long w_cnt = strtol(field[3], NULL, 16);
  int kept = 0;
  for (long k = 0; k < w_cnt; k++) {
    char *word = strtok_r(NULL, " ", &at);
    if (!word || !strtok_r(NULL, " ", &at)) break;  // word, lex_id
    char *w = clean_word(word, strlen(word));
    if (!w) {
      if (k == 0) break;  // an unusable headword drops the synset
      continue;
    }
    bool seen = false;
    for (int j = 0; j < kept; j++) seen |= strcmp(s.word[j], w) == 0;
    if (seen || kept == MAX_WORDS) free(w);
    else s.word[kept++] = w;
  }
  if (kept == 0 || s.lex < 0 || s.lex >= N_LEX || !split_gloss(bar + 3, &s)) {
    synset_free(&s);
    return;
  }
  all->items = grow(all->items, all->count, &all->capacity, sizeof(Synset));
  all->items[all->count++] = s;
}

static void read_wordnet(Synsets *all, const char *dir) {
  for (size_t f = 0; f < sizeof kDataFiles / sizeof kDataFiles[0]; f++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, kDataFiles[f]);
    size_t n;
    uint8_t *raw = file_read(path, &n);
    char *text = xmalloc(n + 1);
    memcpy(text, raw, n);
    text[n] = '\0';
    free(raw);
    int64_t before = all->count;
    for (char *line = text; *line;) {
      char *nl = strchr(line, '\n');
      if (nl) *nl = '\0';
      parse_line(all, line);
      line = nl ? nl + 1 : text + n;
    }
    free(text);
    if (all->count == before)
      die_input(path, "no usable synsets (want WordNet 3 data lines `offset lex type count words .. | gloss`)");
  }
}

// ---------------------------------------------------------------- paragraphs

typedef struct Text {
  char *s;
  size_t n, cap;
} Text;

static void text_add(Text *t, const char *s) {
  size_t n = strlen(s);
  if (t->n + n + 1 > t->cap) {
    t->cap = 2 * (t->n + n + 1);
    char *bigger = xmalloc(t->cap);
    if (t->n) memcpy(bigger, t->s, t->n);
    free(t->s);
    t->s = bigger;
  }
  memcpy(t->s + t->n, s, n + 1);
  t->n += n;
}

// Characters (code points) in the first `bytes` bytes of UTF-8 s.
static int64_t char_offset(const char *s, size_t bytes) {
  int64_t chars = 0;
  for (size_t i = 0; i < bytes; i++) chars += ((uint8_t)s[i] & 0xC0) != 0x80;
  return chars;
}

// An entry's spans in its paragraph's context (byte offsets).
typedef struct Entry {
  const Synset *syn;
  size_t word_at, def_at, example_at;  // example_at 0: not in the context
  size_t synonym_at[MAX_WORDS];        // 0: not in the context
} Entry;

static void add_answer(cJSON *answers, const Text *ctx, size_t at, const char *text, size_t n) {
  cJSON *a = cJSON_CreateObject();
  char *copy = copy_trimmed(text, n);
  cJSON_AddStringToObject(a, "text", copy);
  cJSON_AddNumberToObject(a, "answer_start", (double)char_offset(ctx->s, at));
  cJSON_AddItemToArray(answers, a);
  free(copy);
}

// What a question asks for (its answer's kind) and by what it names the
// entry. Two of them take a step across the entry: asked by a synonym, the
// answer is the definition or the word given one sentence before it.
typedef enum {
  DEFINITION_BY_WORD,
  DEFINITION_BY_SYNONYM,
  WORD_BY_DEFINITION,
  WORD_BY_PART,  // a run of 3-4 words from inside the definition
  WORD_BY_SYNONYM,
  SYNONYM_BY_WORD,
  EXAMPLE_BY_NAME,  // by the word or a synonym
  DEFINITION_BY_EXAMPLE,  // which of a word's senses a sentence uses
  ASK_N
} Ask;

// Three phrasings of each question; %s is the name or the definition.
static const char *const kTemplates[ASK_N][3] = {
    [DEFINITION_BY_WORD] = {"What does %s mean?", "What is meant by %s?", "How would you define %s?"},
    [DEFINITION_BY_SYNONYM] = {"What does %s mean?", "What is meant by %s?", "How would you define %s?"},
    [WORD_BY_DEFINITION] = {"Which word means %s?", "What is the word for %s?", "What term stands for %s?"},
    [WORD_BY_PART] = {"Which word's meaning has the words \"%s\" in it?", "The meaning of which word includes \"%s\"?",
                      "Which word is explained with \"%s\"?"},
    [WORD_BY_SYNONYM] = {"Which word is also called %s?", "%s is another name for which word?",
                         "What is the main word for %s?"},
    [SYNONYM_BY_WORD] = {"What is another word for %s?", "What else is %s called?", "What other name does %s have?"},
    [EXAMPLE_BY_NAME] = {"How is %s used in a sentence?", "Give an example of %s in use.",
                         "In which sentence is %s used?"},
    [DEFINITION_BY_EXAMPLE] = {"What does %1$s mean in \"%2$s\"?", "In \"%2$s\", what is meant by %1$s?",
                               "Which meaning of %1$s fits \"%2$s\"?"},
};

// The answers of kind `ask` about entry e (one; up to 3 with golds).
static void add_answers(cJSON *answers, const Entry *e, const Text *ctx, Ask ask, bool golds) {
  const Synset *s = e->syn;
  const char *def = s->definition, *w = s->word[0];
  size_t def_n = strlen(def), w_n = strlen(w), quote_n = strlen(OPEN_QUOTE);
  if (ask == DEFINITION_BY_WORD || ask == DEFINITION_BY_SYNONYM || ask == DEFINITION_BY_EXAMPLE) {
    add_answer(answers, ctx, e->def_at, def, def_n);
    if (golds) {
      static const char *const kArticles[] = {"a ", "an ", "the ", NULL};
      for (const char *const *a = kArticles; *a; a++)
        if (strncmp(def, *a, strlen(*a)) == 0)
          add_answer(answers, ctx, e->def_at + strlen(*a), def + strlen(*a), def_n - strlen(*a));
      const char *semicolon = strchr(def, ';');
      if (semicolon && semicolon > def) add_answer(answers, ctx, e->def_at, def, (size_t)(semicolon - def));
    }
  } else if (ask == WORD_BY_DEFINITION || ask == WORD_BY_PART || ask == WORD_BY_SYNONYM) {
    add_answer(answers, ctx, e->word_at, w, w_n);
    if (golds) add_answer(answers, ctx, e->word_at - quote_n, ctx->s + e->word_at - quote_n, w_n + 2 * quote_n);
  } else if (ask == SYNONYM_BY_WORD) {
    for (int k = 1; k < MAX_WORDS && s->word[k] && (k == 1 || golds); k++)
      add_answer(answers, ctx, e->synonym_at[k], s->word[k], strlen(s->word[k]));
  } else {
    size_t ex_n = strlen(s->example);
    add_answer(answers, ctx, e->example_at, s->example, ex_n);
    if (golds)
      add_answer(answers, ctx, e->example_at - quote_n, ctx->s + e->example_at - quote_n, ex_n + 2 * quote_n);
  }
}

// A run of 3 or 4 words from the definition, not its start, into part.
static void definition_part(const char *def, char *part, size_t size, Rng *rng) {
  const char *starts[16];
  int n = 0;
  for (const char *c = def; *c && n < 16; c++)
    if (*c != ' ' && (c == def || c[-1] == ' ')) starts[n++] = c;
  int len = 3 + (int)rng_next_below(rng, 2);
  if (len > n - 1) len = n - 1;
  int first = 1 + (int)rng_next_below(rng, (uint32_t)(n - len));
  const char *end = first + len < n ? starts[first + len] - 1 : def + strlen(def);
  snprintf(part, size, "%.*s", (int)(end - starts[first]), starts[first]);
}

// The question about entry e and its answers.
static cJSON *make_question(const Entry *e, const Text *ctx, Ask ask, bool golds, const char *id, Rng *rng) {
  const Synset *s = e->syn;
  int synonyms = 0;
  while (synonyms + 1 < MAX_WORDS && s->word[synonyms + 1]) synonyms++;
  const char *name = s->word[0];
  char part[256];
  if (ask == DEFINITION_BY_SYNONYM || ask == WORD_BY_SYNONYM ||
      (ask == EXAMPLE_BY_NAME && synonyms && phrasing(rng, 2)))
    name = s->word[1 + rng_next_below(rng, (uint32_t)synonyms)];
  if (ask == WORD_BY_DEFINITION) name = s->definition;
  if (ask == WORD_BY_PART) {
    definition_part(s->definition, part, sizeof part, rng);
    name = part;
  }
  char question[512];
  snprintf(question, sizeof question, kTemplates[ask][phrasing(rng, 3)], name, s->example);
  if (ask == WORD_BY_SYNONYM && question[0] >= 'a' && question[0] <= 'z') question[0] -= 'a' - 'A';
  cJSON *qa = cJSON_CreateObject(), *answers = cJSON_CreateArray();
  cJSON_AddStringToObject(qa, "id", id);
  cJSON_AddStringToObject(qa, "question", question);
  add_answers(answers, e, ctx, ask, golds);
  cJSON_AddItemToObject(qa, "answers", answers);
  return qa;
}

// How an entry's sentences may be written, one way drawn per sentence:
// before and after the quoted word, then the definition; the synonyms'
// lead; the example's lead.
static const char *const kMeans[][2] = {{"", " means "}, {"The word ", " stands for "}, {"By ", " one means "}};
static const char *const kAlsoCalled[] = {" It is also called ", " Some call it ", " Another name for it is "};
static const char *const kForExample[] = {" For example: ", " As in ", " One may say: "};

// Writes entry e's sentences into ctx, noting where its spans are; its
// example (when it has one) with probability 1/2 if `examples`.
static void write_entry(Text *ctx, Entry *e, bool examples, Rng *rng) {
  const Synset *s = e->syn;
  const char *const *means = kMeans[phrasing(rng, 3)];
  if (ctx->n) text_add(ctx, " ");
  text_add(ctx, means[0]);
  text_add(ctx, OPEN_QUOTE);
  e->word_at = ctx->n;
  text_add(ctx, s->word[0]);
  text_add(ctx, CLOSE_QUOTE);
  text_add(ctx, means[1]);
  e->def_at = ctx->n;
  text_add(ctx, s->definition);
  text_add(ctx, ".");
  memset(e->synonym_at, 0, sizeof e->synonym_at);
  for (int k = 1; k < MAX_WORDS && s->word[k]; k++) {
    text_add(ctx, k == 1 ? kAlsoCalled[phrasing(rng, 3)] : " or ");
    e->synonym_at[k] = ctx->n;
    text_add(ctx, s->word[k]);
  }
  if (s->word[1]) text_add(ctx, ".");
  e->example_at = 0;
  if (examples && s->example && rng_next_below(rng, 2)) {
    text_add(ctx, kForExample[phrasing(rng, 3)]);
    text_add(ctx, OPEN_QUOTE);
    e->example_at = ctx->n;
    text_add(ctx, s->example);
    text_add(ctx, CLOSE_QUOTE ".");
  }
}

// A paragraph of n entries; its questions go to qas, numbered from *next_id.
// senses: the entries are senses of one word, written without examples,
// each asked about by its example when it has one that the context does not
// hold (else by its definition).
static cJSON *make_paragraph(const Synset *const *syn, int n, bool senses, bool golds, const char *prefix,
                             int64_t *next_id, int64_t want, Rng *rng) {
  Entry entries[8];
  Text ctx = {0};
  for (int i = 0; i < n; i++) {
    entries[i].syn = syn[i];
    write_entry(&ctx, &entries[i], !senses, rng);
  }
  cJSON *par = cJSON_CreateObject(), *qas = cJSON_CreateArray();
  cJSON_AddStringToObject(par, "context", ctx.s);
  for (int i = 0; i < n && *next_id < want; i++) {
    const Entry *e = &entries[i];
    Ask allowed[ASK_N];
    int n_allowed = 0;
    allowed[n_allowed++] = DEFINITION_BY_WORD;
    allowed[n_allowed++] = WORD_BY_DEFINITION;
    if (second_set && count_words(e->syn->definition, strlen(e->syn->definition)) >= 5)
      allowed[n_allowed++] = WORD_BY_PART;
    if (second_set && e->synonym_at[1]) {
      allowed[n_allowed++] = DEFINITION_BY_SYNONYM;
      allowed[n_allowed++] = WORD_BY_SYNONYM;
    }
    if (e->synonym_at[1]) allowed[n_allowed++] = SYNONYM_BY_WORD;
    if (e->example_at) allowed[n_allowed++] = EXAMPLE_BY_NAME;
    char id[64];
    snprintf(id, sizeof id, "%s%07lld", prefix, (long long)(*next_id)++);
    Ask ask = allowed[rng_next_below(rng, (uint32_t)n_allowed)];
    if (senses)  // by its example, unless the context shows it (inside another sense's definition)
      ask = e->syn->example && !strstr(ctx.s, e->syn->example) ? DEFINITION_BY_EXAMPLE : WORD_BY_DEFINITION;
    cJSON_AddItemToArray(qas, make_question(e, &ctx, ask, golds, id, rng));
  }
  cJSON_AddItemToObject(par, "qas", qas);
  free(ctx.s);
  return par;
}

// Whether s can join the paragraph's first n synsets: same file, another
// headword and definition.
static bool fits(const Synset *const *par, int n, const Synset *s) {
  for (int i = 0; i < n; i++)
    if (par[i]->lex != s->lex || strcmp(par[i]->word[0], s->word[0]) == 0 ||
        strcmp(par[i]->definition, s->definition) == 0)
      return false;
  return true;
}

// The synsets grouped by headword: sorted[start[i]..end[i]) are the
// synsets (indices into Synsets.items) whose headword is synset i's.
typedef struct Senses {
  int64_t *sorted, *start, *end;
} Senses;

static const Synsets *sort_synsets;
static int by_headword(const void *a, const void *b) {
  int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  int c = strcmp(sort_synsets->items[i].word[0], sort_synsets->items[j].word[0]);
  return c ? c : (i > j) - (i < j);
}

static Senses senses_make(const Synsets *all) {
  Senses g = {xmalloc(sizeof(int64_t) * ((size_t)all->count + 1)),
              xmalloc(sizeof(int64_t) * ((size_t)all->count + 1)),
              xmalloc(sizeof(int64_t) * ((size_t)all->count + 1))};
  for (int64_t i = 0; i < all->count; i++) g.sorted[i] = i;
  sort_synsets = all;
  qsort(g.sorted, (size_t)all->count, sizeof(int64_t), by_headword);
  for (int64_t a = 0, b; a < all->count; a = b) {
    for (b = a + 1; b < all->count &&
                    strcmp(all->items[g.sorted[a]].word[0], all->items[g.sorted[b]].word[0]) == 0;
         b++) {
    }
    for (int64_t k = a; k < b; k++) g.start[g.sorted[k]] = a, g.end[g.sorted[k]] = b;
  }
  return g;
}

static void senses_free(Senses *g) {
  free(g->sorted);
  free(g->start);
  free(g->end);
}

// A paragraph of `entries` unused senses of one headword into par, the first
// with an example, in random order: from order[*cursor..], which moves past
// synsets that cannot start one. False when none is left.
static bool pick_senses(const Synsets *all, const Senses *g, const uint32_t *order, bool *used, int entries,
                        int64_t *cursor, const Synset **par, Rng *rng) {
  for (; *cursor < all->count; ++*cursor) {
    uint32_t first = order[*cursor];
    const Synset *s = &all->items[first];
    if (used[first] || !s->example) continue;
    int64_t picked[8] = {first};
    int n = 1;
    for (int64_t k = g->start[first]; k < g->end[first] && n < entries; k++) {
      int64_t j = g->sorted[k];
      bool fresh = j != first && !used[j];
      for (int i = 0; i < n && fresh; i++)
        fresh = strcmp(all->items[picked[i]].definition, all->items[j].definition) != 0;
      if (fresh) picked[n++] = j;
    }
    if (n < entries) continue;
    for (int i = n - 1; i > 0; i--) {  // Fisher-Yates
      int j = (int)rng_next_below(rng, (uint32_t)i + 1);
      int64_t t = picked[i];
      picked[i] = picked[j], picked[j] = t;
    }
    for (int i = 0; i < n; i++) {
      used[picked[i]] = true;
      par[i] = &all->items[picked[i]];
    }
    return true;
  }
  return false;
}

// A split: paragraphs of synsets taken from order[] (skipping those used),
// until `want` questions; half of them (while there are some) the senses of
// one word, half of one topic. Articles by lexicographer file, and one for
// the words of several senses.
#define SENSES_ARTICLE N_LEX
static cJSON *make_split(const Synsets *all, const Senses *g, const uint32_t *order, bool *used, int entries,
                         int64_t want, bool golds, const char *prefix, Rng *rng, const char *flag) {
  cJSON *articles[N_LEX + 1] = {0};
  int64_t questions = 0, first_free = 0, sense_cursor = 0;
  const Synset *par[8];
  while (questions < want) {
    if (second_set && rng_next_below(rng, 2) && pick_senses(all, g, order, used, entries, &sense_cursor, par, rng)) {
      if (!articles[SENSES_ARTICLE]) articles[SENSES_ARTICLE] = cJSON_CreateArray();
      cJSON_AddItemToArray(articles[SENSES_ARTICLE],
                           make_paragraph(par, entries, true, golds, prefix, &questions, want, rng));
      continue;
    }
    while (first_free < all->count && used[order[first_free]]) first_free++;
    if (first_free == all->count)
      die_input(flag, "%lld, but WordNet's synsets ran out after %lld questions (fewer --train_questions "
                "and --dev_questions, or fewer --entries)", (long long)want, (long long)questions);
    int n = 0;
    for (int64_t i = first_free; i < all->count && n < entries; i++) {
      const Synset *s = &all->items[order[i]];
      if (used[order[i]] || !fits(par, n, s)) continue;
      par[n++] = s;
      used[order[i]] = true;
    }
    if (n < entries) continue;  // the file ran out: its last synsets stay unused
    int lex = par[0]->lex;
    if (!articles[lex]) articles[lex] = cJSON_CreateArray();
    cJSON_AddItemToArray(articles[lex], make_paragraph(par, n, false, golds, prefix, &questions, want, rng));
  }
  cJSON *root = cJSON_CreateObject(), *data = cJSON_CreateArray();
  cJSON_AddStringToObject(root, "version", "1.1");
  for (int lex = 0; lex <= N_LEX; lex++) {
    if (!articles[lex]) continue;
    cJSON *article = cJSON_CreateObject();
    char title[64];
    snprintf(title, sizeof title, "WordNet %s", lex == SENSES_ARTICLE ? "words of several senses" : kLexNames[lex]);
    cJSON_AddStringToObject(article, "title", title);
    cJSON_AddItemToObject(article, "paragraphs", articles[lex]);
    cJSON_AddItemToArray(data, article);
  }
  cJSON_AddItemToObject(root, "data", data);
  return root;
}

static void write_json(const char *out, const char *name, cJSON *root) {
  char path[4200];
  snprintf(path, sizeof path, "%s/%s", out, name);
  char *text = cJSON_PrintUnformatted(root);
  if (!text) DIE("cJSON_PrintUnformatted failed (out of memory?)");
  AtomicFile f;
  atomic_file_begin(&f, path);
  atomic_file_puts(&f, text);
  atomic_file_puts(&f, "\n");
  atomic_file_commit(&f);
  free(text);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "squad_generate");
  const char *out = config_string(&cfg, "out");
  if (!*out) die_input("--out", "missing: the output folder");
  check_outputs_free(out, kOutputs);
  int entries = (int)config_int(&cfg, "entries");
  const char *questions = config_string(&cfg, "questions");
  if (strcmp(questions, "senses") != 0 && strcmp(questions, "glosses") != 0)
    die_input("--questions", "'%s' is not a set of questions; use glosses or senses", questions);
  second_set = strcmp(questions, "senses") == 0;
  int64_t n_train = config_int(&cfg, "train_questions"), n_dev = config_int(&cfg, "dev_questions");

  Synsets all = {0};
  read_wordnet(&all, config_string(&cfg, "wordnet"));
  if (all.count > UINT32_MAX) DIE("%lld synsets do not fit the shuffle's indices", (long long)all.count);
  uint32_t *order = xmalloc(sizeof(uint32_t) * ((size_t)all.count + 1));
  for (int64_t i = 0; i < all.count; i++) order[i] = (uint32_t)i;
  Rng rng = rng_make((uint64_t)config_int(&cfg, "seed"), 0);
  rng_shuffle_u32(&rng, order, (size_t)all.count);
  bool *used = xcalloc((size_t)all.count + 1, sizeof(bool));
  Senses senses = senses_make(&all);

  cJSON *dev = make_split(&all, &senses, order, used, entries, n_dev, true, "dev", &rng, "--dev_questions");
  cJSON *train = make_split(&all, &senses, order, used, entries, n_train, false, "train", &rng, "--train_questions");
  file_make_dirs(out);
  write_json(out, "dev-v1.1.json", dev);
  write_json(out, "train-v1.1.json", train);
  printf("squad_generate: %lld usable synsets; train %lld questions, dev %lld questions (%d per paragraph) -> %s\n",
         (long long)all.count, (long long)n_train, (long long)n_dev, entries, out);
  cJSON_Delete(dev);
  cJSON_Delete(train);
  for (int64_t i = 0; i < all.count; i++) synset_free(&all.items[i]);
  free(all.items);
  free(order);
  free(used);
  senses_free(&senses);
  config_free(&cfg);
  return 0;
}
