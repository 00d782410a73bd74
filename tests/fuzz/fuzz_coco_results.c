// fuzz_coco_results: the reader of a COCO results file (coco_dets_load_json,
// coco_json.c: what coco_eval scores) on any file, against the ground truth
// of fuzz_inputs.h (fuzz_coco_gt), then the score (coco_eval_all). Checks:
// every stat is -1 (undefined) or in [0, 1]; the evaluation shared out as
// two ranks share it (coco_eval_images on each half of the images, the packs
// unpacked in the other order, coco_eval_accumulate) gives the same stats to
// the bit; the detections written back (coco_dets_write_json) read back as
// the same numbers.
#include <stdlib.h>
#include <string.h>

#include "fuzz_inputs.h"
#include "fuzz_util.h"
#include "object_detection/coco_json.h"

typedef struct Case {
  const CocoGt *gt;
  const char *path;
  CocoDetections dets;
  CocoEvalResult whole, shared;
} Case;

static void read_results(void *ctx) {
  Case *c = ctx;
  coco_dets_init(&c->dets);
  coco_dets_load_json(&c->dets, c->gt, c->path);
}

// Images [0, half) on one "rank", the rest on another; their packs joined
// in reverse order.
static void evaluate_shared(const Case *c, CocoEvalResult *r) {
  int64_t n = c->gt->n_images, half = n / 2;
  int64_t *ids = malloc((size_t)n * sizeof *ids);
  for (int64_t i = 0; i < n; i++) ids[i] = c->gt->images[i].id;
  CocoEvalMatches part[2], all;
  size_t bytes[2];
  uint8_t *pack[2];
  for (int k = 0; k < 2; k++) {
    coco_eval_matches_init(&part[k]);
    coco_eval_images(c->gt, &c->dets, k ? ids + half : ids, k ? n - half : half, &part[k]);
    pack[k] = coco_eval_matches_pack(&part[k], &bytes[k]);
  }
  uint8_t *joined = malloc(bytes[0] + bytes[1]);
  memcpy(joined, pack[1], bytes[1]);
  memcpy(joined + bytes[1], pack[0], bytes[0]);
  coco_eval_matches_init(&all);
  coco_eval_matches_unpack(&all, joined, bytes[0] + bytes[1]);
  coco_eval_accumulate(c->gt, &all, r);
  for (int k = 0; k < 2; k++) {
    coco_eval_matches_free(&part[k]);
    free(pack[k]);
  }
  coco_eval_matches_free(&all);
  free(joined);
  free(ids);
}

static void score(void *ctx) {
  Case *c = ctx;
  coco_eval_all(c->gt, &c->dets, &c->whole);
  evaluate_shared(c, &c->shared);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static CocoGt gt;
  if (!gt.n_images) fuzz_coco_gt(&gt);
  Case c = {.gt = &gt, .path = fuzz_temp_path("results.json")};
  fuzz_write_file(c.path, data, size);
  if (fuzz_call(read_results, &c, FUZZ_RELEASE_LEFTOVERS) != 0) return 0;
  if (fuzz_call(score, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
    fuzz_fail("accepted results that cannot be scored: %s", fuzz_last_error());
  fuzz_check_coco_stats(c.whole.stats);
  if (memcmp(c.whole.stats, c.shared.stats, sizeof c.whole.stats) != 0)
    fuzz_fail("the stats shared out between two ranks differ from one process's");
  fuzz_check_results_round_trip(&c.dets, &gt, fuzz_temp_path("again.json"));
  coco_eval_result_free(&c.whole);
  coco_eval_result_free(&c.shared);
  coco_dets_free(&c.dets);
  return 0;
}
