// fuzz_coco_json: COCO's instances_*.json reader (coco_gt_load_json,
// coco_json.c: the SSD trainer's and coco_eval's ground truth) on any file.
// What it accepts is then scored as the eval scores it (coco_eval_all), with
// each annotation also a detection (its box, a score from its id), so that
// the odd ground truth that passes the reader (boxes of no area, crowds,
// huge coordinates, many boxes on one image) goes through the matching.
// Every stat must be -1 (undefined) or in [0, 1], and the detections,
// written as a results file (coco_dets_write_json), must read back
// (coco_dets_load_json) as the same numbers.
#include <string.h>

#include "fuzz_util.h"
#include "object_detection/coco_json.h"

typedef struct Case {
  const char *path;
  CocoGt gt;
  CocoDetections dets;
} Case;

static void read_gt(void *ctx) {
  Case *c = ctx;
  coco_gt_load_json(&c->gt, c->path);
}

// The ground truth scored against detections of its own annotations.
static void score_self(void *ctx) {
  Case *c = ctx;
  coco_dets_init(&c->dets);
  for (int64_t i = 0; i < c->gt.n_annotations; i++) {
    const CocoAnnotation *a = &c->gt.annotations[i];
    CocoDetection d = {.image_id = a->image_id, .category_id = a->category_id,
                       .score = (double)(a->id % 97) / 97.0};
    memcpy(d.bbox, a->bbox, sizeof d.bbox);
    coco_dets_add(&c->dets, &d);
  }
  CocoEvalResult r;
  coco_eval_all(&c->gt, &c->dets, &r);
  fuzz_check_coco_stats(r.stats);
  coco_eval_result_free(&r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Case c = {.path = fuzz_temp_path("instances.json")};
  fuzz_write_file(c.path, data, size);
  if (fuzz_call(read_gt, &c, FUZZ_RELEASE_LEFTOVERS) != 0) return 0;
  if (fuzz_call(score_self, &c, FUZZ_RELEASE_LEFTOVERS) != 0)
    fuzz_fail("an accepted ground truth cannot be scored: %s", fuzz_last_error());
  fuzz_check_results_round_trip(&c.dets, &c.gt, fuzz_temp_path("results.json"));
  coco_dets_free(&c.dets);
  coco_gt_free(&c.gt);
  return 0;
}
