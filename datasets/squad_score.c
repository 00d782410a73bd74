// squad_score: EM and F1 of a predictions file against a SQuAD v1.1 data
// set, as the official v1.1 evaluation script scores them
// (language/squad_eval.h), for scoring --predictions_out files and for
// testing the metric against an independent implementation:
//   squad_score --data=dev-v1.1.json --predictions=predictions.json
// prints one line, as the official script does (Python's json.dumps):
//   {"exact_match": 81.2, "f1": 88.5}
// predictions.json is one object, question id -> answer text. As in the
// official script: every question of the data set counts; one without a
// prediction scores 0 with a warning on stderr (here the first 10 by id,
// then a count); a prediction whose id is no question's is ignored; when a
// key appears twice in the predictions the last one holds (Python's json);
// a "version" other than "1.1" is a warning. The official script fails on
// (and this tool refuses, with one line naming the file and the item): a
// file that is not JSON, a missing or mistyped field, a question without a
// gold answer, a prediction that is not a string.
#include <cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "core/config.h"
#include "core/json.h"
#include "language/squad_eval.h"
#include "language/squad_features.h"

#define SQUAD_SCORE_WARNINGS 10

static const ConfigKey KEYS[] = {
    {"data", CFG_STRING, "", "the SQuAD v1.1 JSON file (dev-v1.1.json)", NULL},
    {"predictions", CFG_STRING, "", "the predictions JSON file: {\"question id\": \"answer\", ...}", NULL},
};

// A prediction: its question id and answer, in file order.
typedef struct Prediction {
  const char *id, *text;
  size_t order;
} Prediction;

static int prediction_cmp(const void *a, const void *b) {
  const Prediction *x = a, *y = b;
  int c = strcmp(x->id, y->id);
  if (c) return c;
  return x->order < y->order ? -1 : x->order > y->order;
}

// The predictions sorted by id, of equal ids the last in the file first
// (so that a lookup finds the one Python's json keeps).
static Prediction *read_predictions(const cJSON *root, const char *path, size_t *n) {
  if (!cJSON_IsObject(root)) die_input(path, "not a JSON object of question id -> answer text");
  *n = (size_t)cJSON_GetArraySize(root);
  Prediction *p = xmalloc((*n + 1) * sizeof(Prediction));
  size_t k = 0;
  for (const cJSON *e = root->child; e; e = e->next, k++) {
    if (!cJSON_IsString(e)) die_input(path, "the prediction for \"%s\" is not a string", e->string);
    p[k] = (Prediction){e->string, e->valuestring, *n - k};  // later first among equals
  }
  qsort(p, *n, sizeof *p, prediction_cmp);
  return p;
}

static const char *find_prediction(const Prediction *p, size_t n, const char *id) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (strcmp(p[mid].id, id) < 0) lo = mid + 1;
    else hi = mid;
  }
  return lo < n && strcmp(p[lo].id, id) == 0 ? p[lo].text : NULL;
}

typedef struct Scoring {
  const char *path;
  const Prediction *preds;
  size_t n_preds;
  SquadStats stats;
  size_t unanswered;
} Scoring;

// One question (squad_json_walk), where naming it.
static void score_question(void *ctx, const cJSON *qa, const char *where) {
  Scoring *s = ctx;
  const char *id = squad_json_field(qa, "id", cJSON_IsString, "a string", s->path, where)->valuestring;
  const cJSON *answers = squad_json_field(qa, "answers", cJSON_IsArray, "an array", s->path, where);
  int n_golds = cJSON_GetArraySize(answers);
  if (n_golds == 0) die_input(s->path, "%s (id %s): no gold answer", where, id);
  const char **golds = xmalloc((size_t)n_golds * sizeof(char *));
  int k = 0;
  for (const cJSON *a = answers->child; a; a = a->next, k++) {
    char at[160];
    snprintf(at, sizeof at, "%s.answers[%d]", where, k);
    golds[k] = squad_json_field(a, "text", cJSON_IsString, "a string", s->path, at)->valuestring;
  }
  const char *prediction = find_prediction(s->preds, s->n_preds, id);
  if (prediction) {
    squad_stats_add(&s->stats, prediction, golds, n_golds);
  } else {
    if (s->unanswered++ < SQUAD_SCORE_WARNINGS)
      fprintf(stderr, "warning: unanswered question %s will receive score 0\n", id);
    squad_stats_add_unanswered(&s->stats);
  }
  free(golds);
}

static void score_data(Scoring *s, const cJSON *root) {
  const cJSON *version = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "version") : NULL;
  if (!cJSON_IsString(version) || strcmp(version->valuestring, "1.1") != 0)
    fprintf(stderr, "warning: %s: the evaluation expects version 1.1, the file says %s\n", s->path,
            cJSON_IsString(version) ? version->valuestring : "none");
  squad_json_walk(root, s->path, &(SquadWalk){NULL, score_question, s});
}

// Python's repr() of a float (what json.dumps writes): the shortest digits
// that read back as x, in positional notation unless the exponent is below
// -4 or at least 16, with ".0" on a whole number.
static void python_float(double x, char *out, size_t out_bytes) {
  for (int digits = 1; digits <= 17; digits++) {
    snprintf(out, out_bytes, "%.*g", digits, x);
    if (strtod(out, NULL) == x) break;
  }
  const char *e = strchr(out, 'e');
  int exponent = e ? atoi(e + 1) : 0;
  if (e && exponent >= -4 && exponent < 16) {
    int digits = 0;
    for (const char *c = out; c < e; c++) digits += isdigit((unsigned char)*c) != 0;
    int decimals = digits - 1 - exponent;
    snprintf(out, out_bytes, "%.*f", decimals > 0 ? decimals : 0, x);
  }
  if (!strpbrk(out, ".eni")) strncat(out, ".0", out_bytes - strlen(out) - 1);
}

int main(int argc, char **argv) {
  Config cfg;
  config_init(&cfg);
  config_add_keys(&cfg, KEYS, (int)(sizeof KEYS / sizeof KEYS[0]));
  config_from_args(&cfg, argc, argv, "squad_score");
  const char *data_path = config_string(&cfg, "data"), *pred_path = config_string(&cfg, "predictions");
  if (!*data_path) die_input("--data", "missing: the SQuAD v1.1 JSON file");
  if (!*pred_path) die_input("--predictions", "missing: the predictions JSON file");
  cJSON *data = json_read_file(data_path), *preds = json_read_file(pred_path);
  Scoring s = {.path = data_path};
  s.preds = read_predictions(preds, pred_path, &s.n_preds);
  score_data(&s, data);
  if (s.unanswered > SQUAD_SCORE_WARNINGS)
    fprintf(stderr, "warning: %zu questions unanswered in all, each scored 0\n", s.unanswered);
  char em[64], f1[64];
  python_float(squad_exact_match(&s.stats), em, sizeof em);
  python_float(squad_f1(&s.stats), f1, sizeof f1);
  printf("{\"exact_match\": %s, \"f1\": %s}\n", em, f1);
  free((void *)s.preds);
  cJSON_Delete(data);
  cJSON_Delete(preds);
  config_free(&cfg);
  return 0;
}
