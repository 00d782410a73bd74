// coco_eval: the COCO box mAP of a results file against an annotations
// file, printed as pycocotools' COCOeval.summarize() prints it (12 lines).
//   coco_eval ANNOTATIONS.json RESULTS.json [--digits=N]
// --digits: decimals of the numbers (default 3, as pycocotools; 17 for
// comparing with another implementation). Bad input is one line naming the
// file and exit status 2.
#include <stdlib.h>
#include <string.h>

#include "core/check.h"
#include "object_detection/coco_eval.h"
#include "object_detection/coco_json.h"

static const char *const USAGE = "usage: coco_eval ANNOTATIONS.json RESULTS.json [--digits=N]";

// --digits=N, N in [0, 17].
static int parse_digits(const char *arg) {
  const char *value = arg + strlen("--digits=");
  char *end = NULL;
  long n = strtol(value, &end, 10);
  if (*value == '\0' || *end != '\0' || n < 0 || n > 17)
    die_input("--digits", "\"%s\" is not an integer in [0, 17]", value);
  return (int)n;
}

int main(int argc, char **argv) {
  const char *paths[2] = {NULL, NULL};
  int n_paths = 0, digits = 3;
  for (int i = 1; i < argc; i++) {
    if (strncmp(argv[i], "--digits=", 9) == 0) digits = parse_digits(argv[i]);
    else if (strncmp(argv[i], "--", 2) == 0) die_input(argv[i], "unknown flag (%s)", USAGE);
    else if (n_paths < 2) paths[n_paths++] = argv[i];
    else die_input(argv[i], "one argument too many (%s)", USAGE);
  }
  if (n_paths < 2) die_input("coco_eval", "%s", USAGE);
  CocoGt gt;
  coco_gt_load_json(&gt, paths[0]);
  CocoDetections dets;
  coco_dets_init(&dets);
  coco_dets_load_json(&dets, &gt, paths[1]);
  CocoEvalResult r;
  coco_eval_all(&gt, &dets, &r);
  coco_eval_print_stats(stdout, r.stats, digits);
  coco_eval_result_free(&r);
  coco_dets_free(&dets);
  coco_gt_free(&gt);
  return 0;
}
