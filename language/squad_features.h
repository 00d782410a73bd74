// squad_features.h: SQuAD v1.1 questions into the model's inputs, as the
// well-known BERT fine-tuning recipes build them: the question's WordPiece
// tokens (at most max_query_length), then windows of the context's tokens
// (at most max_seq_length - query - 3 each, each window starting doc_stride
// tokens after the last one, until one reaches the context's end), each
// window one feature:
//     [CLS] question [SEP] context window [SEP]     (token types 0 ... 0 1 ... 1)
// For training, the answer's token span when the whole answer lies in the
// window, else position 0 ([CLS]) for both ends. For evaluation, each context
// token's byte span in the original context and whether this window gives it
// the most context (min(tokens left, tokens right) + 0.01 x window length,
// the first window on ties), which the span search needs (squad_eval.h).
//
// The data files are SQuAD's JSON ({"data": [{"paragraphs": [{"context",
// "qas": [{"id", "question", "answers": [{"text", "answer_start"}]}]}]}]});
// answer_start counts characters (code points), as Python indexes strings.
// Each of these stops with a one-line error naming the file and the item
// (data[0].paragraphs[3].qas[1], with the question's id): a file that is
// not such JSON, a field missing or of the wrong type, text that is not
// UTF-8, an empty context with questions, a question without answers, an
// answer_start that is not a character index of the context or does not
// point at its text, an id that an earlier question has (ids key the
// predictions); with a vocabulary also a first answer that no token
// covers, and a max_query_length that leaves a window no room for context.
// Handled as the reference recipes do: a training answer that is whole in
// no window (too long for one) gives each window the position of [CLS]; a
// question of no tokens (empty) is kept, with a warning.
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "wordpiece.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct SquadFeatureConfig {
  int max_seq_length, doc_stride, max_query_length;
} SquadFeatureConfig;

// One window: n tokens (no padding).
typedef struct SquadFeature {
  int64_t example;        // the question's index in file order
  int n, query_tokens;    // tokens; the question's tokens ([CLS] and [SEP] not counted)
  int32_t *ids;           // (n)
  int32_t start, end;     // the answer's positions (0, 0: not in this window)
  int32_t *span_begin;    // (n) context bytes of each token, -1 outside the context
  int32_t *span_end;      // (n)
  uint8_t *max_context;   // (n) 1 where this window is the token's max-context one
} SquadFeature;

// One question: its id, context and gold answers (texts, NUL-terminated).
typedef struct SquadExample {
  char *id, *question, *context;
  int n_answers;
  char **answers;
} SquadExample;

typedef struct SquadSet {
  int64_t n_examples, n_features;
  SquadExample *examples;
  SquadFeature *features;
} SquadSet;

// Reads the SQuAD JSON at path and builds every question's features; with
// vocab NULL, only the questions (examples: ids, contexts, answers, the
// answer offsets checked), and cfg is not read.
void squad_set_build(SquadSet *s, const char *path, const WpVocab *vocab,
                     const SquadFeatureConfig *cfg);
void squad_set_free(SquadSet *s);

// SQuAD's JSON walked in file order, for the readers of such files
// (squad_set_build, squad_score): paragraph(ctx, paragraph, where) for each
// paragraph (unless NULL), then question(ctx, qa, where) for each of its
// questions, where naming the item (data[0].paragraphs[3],
// data[0].paragraphs[3].qas[1]). A missing or mistyped "data", "paragraphs"
// or "qas" dies naming the file (path) and the item.
typedef struct SquadWalk {
  void (*paragraph)(void *ctx, const cJSON *paragraph, const char *where);
  void (*question)(void *ctx, const cJSON *qa, const char *where);
  void *ctx;
} SquadWalk;
void squad_json_walk(const cJSON *root, const char *path, const SquadWalk *walk);

// obj[key], which must be of the kind is() accepts (kind says which: "a
// string"), or dies naming path, where and key.
const cJSON *squad_json_field(const cJSON *obj, const char *key, cJSON_bool (*is)(const cJSON *const),
                              const char *kind, const char *path, const char *where);

#ifdef __cplusplus
}
#endif
