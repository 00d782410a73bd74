// SQuAD questions into windows of token ids (language/squad_features.h), on
// a hand-made vocabulary and data file: the windows' layout and starts, the
// answer positions in each window (and [CLS] where the answer is not whole
// in it), every context token's byte span and its one max-context window,
// character (not byte) answer offsets, and bad files.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../language/squad_features.h"
#include "core/file.h"
#include "tests/harness/test.h"

static char vocab_path[4096], data_path[4096];

// Ids: [PAD] 0, [UNK] 1, [CLS] 2, [SEP] 3, then the words in this order.
static const char *kVocab[] = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "what", "is", "the", "cafe",
                               "a", "b", "c", "d", "e", "f", "g", "h", "?", "."};

static void write_files(const char *json) {
  const char *dir = test_tmpdir();
  snprintf(vocab_path, sizeof vocab_path, "%s/vocab.txt", dir);
  snprintf(data_path, sizeof data_path, "%s/squad.json", dir);
  char text[512] = "";
  for (size_t i = 0; i < sizeof kVocab / sizeof kVocab[0]; i++)
    strcat(strcat(text, kVocab[i]), "\n");
  file_write(vocab_path, text, strlen(text));
  file_write(data_path, json, strlen(json));
}

// Context "café a b c d e f g h ." (é: 2 bytes): 10 tokens, café at bytes
// [0, 5). The answer "e f" starts at character 13 (byte 14): tokens 5 and 6.
static const char *kGood =
    "{\"version\": \"1.1\", \"data\": [{\"title\": \"t\", \"paragraphs\": [{\"context\": "
    "\"caf\\u00e9 a b c d e f g h .\", \"qas\": [{\"id\": \"q1\", \"question\": \"what is the cafe?\", "
    "\"answers\": [{\"text\": \"e f\", \"answer_start\": 13}, {\"text\": \"e\", \"answer_start\": 13}]}]}]}]}";

static void windows_positions_and_spans(void) {
  write_files(kGood);
  WpVocab *v = wp_vocab_load(vocab_path);
  // 5 question tokens; 12 - 5 - 3 = 4 context tokens a window, stride 3:
  // windows at 0, 3, 6 (the last reaching token 9).
  SquadFeatureConfig cfg = {.max_seq_length = 12, .doc_stride = 3, .max_query_length = 8};
  SquadSet s;
  squad_set_build(&s, data_path, v, &cfg);
  CHECK_EQ_INT(s.n_examples, 1);
  CHECK_STR(s.examples[0].id, "q1");
  CHECK_EQ_INT(s.examples[0].n_answers, 2);
  CHECK_STR(s.examples[0].answers[1], "e");
  REQUIRE(s.n_features == 3);
  const int32_t query[] = {2, 4, 5, 6, 7, 16, 3};  // [CLS] what is the cafe ? [SEP]
  const int starts[] = {0, 3, 6};
  int max_ctx_count[10] = {0};
  for (int w = 0; w < 3; w++) {
    const SquadFeature *f = &s.features[w];
    CHECK_EQ_INT(f->example, 0);
    CHECK_EQ_INT(f->query_tokens, 5);
    CHECK_EQ_INT(f->n, 12);
    CHECK(!memcmp(f->ids, query, sizeof query));
    CHECK_EQ_INT(f->ids[11], 3);
    for (int t = 0; t < 7; t++) CHECK(f->span_begin[t] == -1 && f->span_end[t] == -1 && !f->max_context[t]);
    for (int t = 0; t < 4; t++) {
      int i = starts[w] + t;  // context token i: "café" then a..h then "."
      int32_t want_id = i == 0 ? 7 : i == 9 ? 17 : 8 + (i - 1);
      CHECK_EQ_INT(f->ids[7 + t], want_id);
      int32_t begin = i == 0 ? 0 : 4 + 2 * i;  // "café " is 6 bytes
      CHECK_EQ_INT(f->span_begin[7 + t], begin);
      CHECK_EQ_INT(f->span_end[7 + t], begin + (i == 0 ? 5 : 1));
      max_ctx_count[i] += f->max_context[7 + t];
    }
  }
  // Each context token has one max-context window. Token 3 (c) ends window
  // 0 and starts window 1 (score 0 + 0.04 in both): the first, window 0;
  // token 6 (f) likewise: window 1.
  for (int i = 0; i < 10; i++) CHECK_MSG(max_ctx_count[i] == 1, "token %d: %d windows", i, max_ctx_count[i]);
  CHECK(s.features[0].max_context[7 + 3] && !s.features[1].max_context[7 + 0]);
  CHECK(s.features[1].max_context[7 + 3] && !s.features[2].max_context[7 + 0]);
  // "e f" = tokens 5, 6: whole in window 1 (3..6) at positions 9, 10 and in
  // window 2? (6..9) no: only f; window 0 (0..3) neither.
  CHECK(s.features[0].start == 0 && s.features[0].end == 0);
  CHECK_EQ_INT(s.features[1].start, 9);
  CHECK_EQ_INT(s.features[1].end, 10);
  CHECK(s.features[2].start == 0 && s.features[2].end == 0);
  squad_set_free(&s);
  wp_vocab_free(v);
}

// A stride longer than a window: each window starts where the last ended
// (4 context tokens a window: windows at 0, 4, 8).
static void stride_beyond_the_window(void) {
  write_files(kGood);
  WpVocab *v = wp_vocab_load(vocab_path);
  SquadFeatureConfig cfg = {.max_seq_length = 12, .doc_stride = 100, .max_query_length = 8};
  SquadSet s;
  squad_set_build(&s, data_path, v, &cfg);
  REQUIRE(s.n_features == 3);
  CHECK_EQ_INT(s.features[0].span_begin[7], 0);
  CHECK_EQ_INT(s.features[1].span_begin[7], 4 + 2 * 4);
  CHECK_EQ_INT(s.features[2].span_begin[7], 4 + 2 * 8);
  CHECK_EQ_INT(s.features[2].n, 7 + 2 + 1);  // tokens 8 and 9, then [SEP]
  squad_set_free(&s);
  wp_vocab_free(v);
}

// The question is cut to max_query_length tokens; a short context is one window.
static void long_question_is_cut(void) {
  write_files(kGood);
  WpVocab *v = wp_vocab_load(vocab_path);
  SquadFeatureConfig cfg = {.max_seq_length = 64, .doc_stride = 3, .max_query_length = 2};
  SquadSet s;
  squad_set_build(&s, data_path, v, &cfg);
  REQUIRE(s.n_features == 1);
  CHECK_EQ_INT(s.features[0].query_tokens, 2);
  CHECK_EQ_INT(s.features[0].n, 2 + 10 + 3);
  CHECK_EQ_INT(s.features[0].ids[3], 3);  // [SEP] after "what is"
  CHECK_EQ_INT(s.features[0].start, 4 + 5);
  squad_set_free(&s);
  wp_vocab_free(v);
}

static void build_bad(void *ctx) {
  write_files(ctx);
  WpVocab *v = wp_vocab_load(vocab_path);
  SquadFeatureConfig cfg = {.max_seq_length = 12, .doc_stride = 3, .max_query_length = 8};
  SquadSet s;
  squad_set_build(&s, data_path, v, &cfg);
}

static void bad_files_die_naming_the_item(void) {
  // 14 is the byte offset of "e f", a character too far (é is 2 bytes).
  CHECK_DIES_WITH(build_bad,
                  "{\"data\": [{\"paragraphs\": [{\"context\": \"caf\\u00e9 a b c d e f\", \"qas\": [{\"id\": "
                  "\"q7\", \"question\": \"what\", \"answers\": [{\"text\": \"e f\", \"answer_start\": 14}]}]}]}]}",
                  "data[0].paragraphs[0].qas[0].answers[0] (id q7): answer_start 14 does not point at the "
                  "answer \"e f\" (the context there reads \" f\")");
  CHECK_DIES_WITH(build_bad,
                  "{\"data\": [{\"paragraphs\": [{\"context\": \"a b\", \"qas\": [{\"id\": \"q8\", "
                  "\"answers\": [{\"text\": \"a\", \"answer_start\": 0}]}]}]}]}",
                  "data[0].paragraphs[0].qas[0]: \"question\" missing or not a string");
  CHECK_DIES_WITH(build_bad,
                  "{\"data\": [{\"paragraphs\": [{\"context\": \"a b\", \"qas\": [{\"id\": \"q9\", "
                  "\"question\": \"what\", \"answers\": []}]}]}]}",
                  "data[0].paragraphs[0].qas[0] (id q9): no answers");
  CHECK_DIES_WITH(build_bad, "[1, 2]", "the top level: \"data\" missing or not an array");
  CHECK_DIES_WITH(build_bad, "{\"version\": \"1.1\"}", "the top level: \"data\" missing or not an array");
}

int main(void) {
  TEST_RUN(windows_positions_and_spans);
  TEST_RUN(stride_beyond_the_window);
  TEST_RUN(long_question_is_cut);
  TEST_RUN(bad_files_die_naming_the_item);
  return test_finish();
}
