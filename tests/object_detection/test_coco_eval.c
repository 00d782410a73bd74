// The COCO box evaluation (object_detection/coco_eval.h) on hand-checked
// cases - a perfect detection, crowds, false positives on images without
// ground truth, no detections, area ranges, the maxDets cut, ties - and
// ranks: images split over three ranks, exchanged as packs (concatenated,
// or summed into zeroed buffers), accumulate to the bits of one process.
// tests/object_detection/test_coco_eval_pycocotools.py checks random files
// against pycocotools itself.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "object_detection/coco_eval.h"
#include "object_detection/coco_json.h"
#include "tests/harness/test.h"

enum { AP, AP50, AP75, APS, APM, APL, AR1, AR10, AR100, ARS, ARM, ARL };

// A hand-made case: ground truth and detections.
typedef struct Scene {
  CocoGt gt;
  CocoDetections d;
} Scene;

// A box annotation; area < 0 takes the box's.
static void gt_box(CocoGt *gt, int64_t image, int64_t cat, const double b[4], double area, bool crowd) {
  CocoAnnotation a = {.id = gt->n_annotations + 1, .image_id = image, .category_id = cat,
                      .bbox = {b[0], b[1], b[2], b[3]}, .area = area < 0 ? b[2] * b[3] : area,
                      .iscrowd = crowd};
  coco_gt_add_annotation(gt, &a);
}

static void det(CocoDetections *d, int64_t image, int64_t cat, const double b[4], double score) {
  CocoDetection x = {.image_id = image, .category_id = cat, .bbox = {b[0], b[1], b[2], b[3]}, .score = score};
  coco_dets_add(d, &x);
}

static const double MEDIUM[4] = {100, 100, 50, 50};  // area 2500
static const double ELSEWHERE[4] = {400, 300, 50, 50};

// Two images (ids 1 and 2, 640x480), categories 3 and 9, no detections;
// with_box: a medium box of category 3 on image 1.
static Scene scene_begin(bool with_box) {
  Scene s;
  coco_gt_init(&s.gt);
  coco_dets_init(&s.d);
  coco_gt_add_image(&s.gt, 2, 640, 480);
  coco_gt_add_image(&s.gt, 1, 640, 480);
  coco_gt_add_category(&s.gt, 9, "b");
  coco_gt_add_category(&s.gt, 3, "a");
  if (with_box) gt_box(&s.gt, 1, 3, MEDIUM, -1, false);
  return s;
}

// Evaluates every image; checks stats against want. pycocotools divides by
// fp + tp + 2^-52, so a perfect precision is 1 - 2^-53: 1e-12 covers that
// and the mean's rounding; a broken rule moves a stat here by 0.25 or more.
static void check_stats(Scene *s, const double want[COCO_N_STATS]) {
  coco_gt_index(&s->gt, "test");
  CocoEvalResult r;
  coco_eval_all(&s->gt, &s->d, &r);
  for (int i = 0; i < COCO_N_STATS; i++) CHECK_MSG(fabs(r.stats[i] - want[i]) <= 1e-12, "stat %d: %.17g, want %.17g", i, r.stats[i], want[i]);
  coco_eval_result_free(&r);
  coco_gt_free(&s->gt);
  coco_dets_free(&s->d);
}

static void perfect_detection_scores_one(void) {
  Scene s = scene_begin(true);
  det(&s.d, 1, 3, MEDIUM, 0.9);
  // Medium only: small and large have no ground truth, so -1.
  check_stats(&s, (double[]){1, 1, 1, -1, 1, -1, 1, 1, 1, -1, 1, -1});
}

static void crowd_only_image_is_undefined(void) {
  Scene s = scene_begin(false);
  gt_box(&s.gt, 1, 3, (double[]){0, 0, 300, 300}, -1, true);
  det(&s.d, 1, 3, MEDIUM, 0.9);
  // Nothing countable: every stat is undefined, not 0.
  check_stats(&s, (double[]){-1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1});
}

static void crowd_absorbs_several_detections(void) {
  Scene s = scene_begin(true);
  det(&s.d, 1, 3, MEDIUM, 0.5);
  // Three better-scored detections inside a crowd on image 2: its IoU
  // divides by the detection's area (IoU 1 for each), all three match it
  // and are ignored, so the real one is still ranked first.
  gt_box(&s.gt, 2, 3, (double[]){0, 0, 600, 400}, -1, true);
  for (int i = 0; i < 3; i++) det(&s.d, 2, 3, (double[]){10.0 + 50 * i, 10, 40, 40}, 0.9);
  check_stats(&s, (double[]){1, 1, 1, -1, 1, -1, 1, 1, 1, -1, 1, -1});
}

static void detection_without_ground_truth_is_false_positive(void) {
  Scene s = scene_begin(true);
  det(&s.d, 1, 3, MEDIUM, 0.5);
  det(&s.d, 2, 3, MEDIUM, 0.9);  // image 2 has no ground truth
  // Ranked FP then TP: precision 1/2 at recall 1, so 0.5 at every point.
  // AR1 is per image: each image's best detection, so the TP is kept.
  check_stats(&s, (double[]){0.5, 0.5, 0.5, -1, 0.5, -1, 1, 1, 1, -1, 1, -1});
}

// The MLPerf reference evaluates only the images with an annotation (crowd
// ones too): coco_gt_annotated_images counts them, and leaving an image
// without one out drops its detections' false positives from the mAP.
static void images_without_annotations_may_be_left_out(void) {
  Scene s = scene_begin(true);
  coco_gt_add_image(&s.gt, 3, 640, 480);
  gt_box(&s.gt, 3, 9, (double[]){0, 0, 300, 300}, -1, true);  // crowd only
  det(&s.d, 1, 3, MEDIUM, 0.5);
  det(&s.d, 2, 3, MEDIUM, 0.9);  // image 2 has no annotation
  coco_gt_index(&s.gt, "test");
  CHECK_EQ_INT(coco_gt_annotated_images(&s.gt, NULL, 0), 2);
  CHECK_EQ_INT(coco_gt_annotated_images(&s.gt, (int64_t[]){2, 1}, 2), 1);
  CHECK_EQ_INT(coco_gt_annotated_images(&s.gt, (int64_t[]){2, 7}, 2), 0);
  CocoEvalMatches m;
  coco_eval_matches_init(&m);
  coco_eval_images(&s.gt, &s.d, (int64_t[]){1, 3}, 2, &m);
  CocoEvalResult annotated, all;
  coco_eval_accumulate(&s.gt, &m, &annotated);
  coco_eval_all(&s.gt, &s.d, &all);
  CHECK_NEAR(annotated.stats[0], 1.0, 1e-12);
  CHECK_NEAR(all.stats[0], 0.5, 1e-12);  // the false positive ranked first
  coco_eval_result_free(&annotated);
  coco_eval_result_free(&all);
  coco_eval_matches_free(&m);
  coco_gt_free(&s.gt);
  coco_dets_free(&s.d);
}

static void no_detections_score_zero(void) {
  Scene s = scene_begin(true);
  check_stats(&s, (double[]){0, 0, 0, -1, 0, -1, 0, 0, 0, -1, 0, -1});
}

static void area_range_is_the_annotation_area(void) {
  Scene s = scene_begin(false);
  // A 10x10 box whose "area" field says medium: it counts as medium only.
  // The detection on it matches it in "all" and "medium"; in "small" the
  // ground truth is out of range, so the match is ignored there.
  const double tiny[4] = {5, 5, 10, 10}, big[4] = {0, 0, 200, 200};
  gt_box(&s.gt, 1, 3, tiny, 5000, false);
  det(&s.d, 1, 3, tiny, 0.9);
  gt_box(&s.gt, 2, 9, big, -1, false);  // large
  det(&s.d, 2, 9, big, 0.8);
  // A missed small one of category 9 on image 1: small AP/AR 0, and it
  // halves AP and AR of category 9 in "all".
  gt_box(&s.gt, 1, 9, (double[]){300, 300, 8, 8}, -1, false);
  // AP: (category 3: 1 + category 9: precision 1 up to recall 0.5 -> 51 of
  // 101 points) / 2.
  double ap9 = 51.0 / 101, ap = (1 + ap9) / 2;
  check_stats(&s, (double[]){ap, ap, ap, 0, 1, 1, 0.75, 0.75, 0.75, 0, 1, 1});
}

static void max_dets_cut(void) {
  Scene s = scene_begin(true);
  det(&s.d, 1, 3, ELSEWHERE, 0.9);  // the best score misses
  det(&s.d, 1, 3, MEDIUM, 0.8);
  // AR1 sees the miss only; AR10 both. AP (100 detections): FP, TP.
  check_stats(&s, (double[]){0.5, 0.5, 0.5, -1, 0.5, -1, 0, 1, 1, -1, 1, -1});
}

static void ties_keep_the_order_given(void) {
  // Equal scores rank in the order added (numpy's stable argsort): the
  // miss first gives 0.5, the hit first 1.
  for (int hit_first = 0; hit_first < 2; hit_first++) {
    Scene s = scene_begin(true);
    det(&s.d, 1, 3, hit_first ? MEDIUM : ELSEWHERE, 0.7);
    det(&s.d, 1, 3, hit_first ? ELSEWHERE : MEDIUM, 0.7);
    double ap = hit_first ? 1 : 0.5;
    check_stats(&s, (double[]){ap, ap, ap, -1, ap, -1, hit_first, 1, 1, -1, 1, -1});
  }
}

// ---------------------------------------------------------------- ranks

enum { N_IMAGES = 24, N_RANKS = 3 };

static uint64_t lcg(uint64_t *s) {
  *s = *s * 6364136223846793005ull + 1442695040888963407ull;
  return *s >> 33;
}

// A made-up set: 24 images (ids 10, 17, ...), categories 3 and 9, 0-5
// boxes an image (every 7th a crowd), detections near most of them, false
// positives, scores from four values (ties across images).
static void random_set(CocoGt *gt, CocoDetections *d) {
  coco_gt_init(gt);
  coco_dets_init(d);
  coco_gt_add_category(gt, 9, "b");
  coco_gt_add_category(gt, 3, "a");
  uint64_t s = 42;
  for (int64_t i = 0; i < N_IMAGES; i++) {
    int64_t image = 10 + 7 * i;
    coco_gt_add_image(gt, image, 640, 480);
    for (int64_t g = (int64_t)(lcg(&s) % 6); g > 0; g--) {
      double b[4] = {(double)(lcg(&s) % 400), (double)(lcg(&s) % 300), 5.0 + lcg(&s) % 150, 5.0 + lcg(&s) % 150};
      int64_t cat = lcg(&s) % 2 ? 3 : 9;
      gt_box(gt, image, cat, b, -1, gt->n_annotations % 7 == 6);
      double shift = (double)(lcg(&s) % 9);
      if (lcg(&s) % 4) det(d, image, cat, (double[]){b[0] + shift, b[1], b[2], b[3] - shift}, 0.2 * (double)(lcg(&s) % 4));
    }
    if (lcg(&s) % 2) det(d, image, 3, ELSEWHERE, 0.2 * (double)(lcg(&s) % 4));
  }
  coco_gt_index(gt, "test");
}

// Rank r's images (every N_RANKS-th, as a sampler deals them) and packed
// matches, from its own detections only.
static uint8_t *rank_pack(const CocoGt *gt, const CocoDetections *all, int r, size_t *n_bytes) {
  CocoDetections mine;
  coco_dets_init(&mine);
  int64_t ids[N_IMAGES], n = 0;
  for (int64_t i = r; i < N_IMAGES; i += N_RANKS) ids[n++] = gt->images[i].id;
  for (int64_t i = 0; i < all->n; i++)
    if ((all->dets[i].image_id - 10) / 7 % N_RANKS == r) coco_dets_add(&mine, &all->dets[i]);
  CocoEvalMatches m;
  coco_eval_matches_init(&m);
  coco_eval_images(gt, &mine, ids, n, &m);
  uint8_t *bytes = coco_eval_matches_pack(&m, n_bytes);
  coco_eval_matches_free(&m);
  coco_dets_free(&mine);
  return bytes;
}

static void check_same_result(const CocoEvalResult *a, const CocoEvalResult *b) {
  size_t n_prec = (size_t)COCO_N_IOU * COCO_N_RECALL * (size_t)a->n_categories * COCO_N_AREA * COCO_N_MAXDET;
  size_t n_rec = (size_t)COCO_N_IOU * (size_t)a->n_categories * COCO_N_AREA * COCO_N_MAXDET;
  CHECK(memcmp(a->precision, b->precision, n_prec * sizeof(double)) == 0);
  CHECK(memcmp(a->recall, b->recall, n_rec * sizeof(double)) == 0);
  CHECK(memcmp(a->stats, b->stats, sizeof a->stats) == 0);
}

static void ranks_combine_to_the_whole(void) {
  CocoGt gt;
  CocoDetections d;
  random_set(&gt, &d);
  CocoEvalResult whole;
  coco_eval_all(&gt, &d, &whole);
  CHECK(whole.stats[AP] > 0.1 && whole.stats[AP] < 0.9);  // neither trivial case
  uint8_t *packs[N_RANKS];
  size_t sizes[N_RANKS], total = 0;
  for (int r = 0; r < N_RANKS; r++) {
    packs[r] = rank_pack(&gt, &d, r, &sizes[r]);
    REQUIRE(sizes[r] % 8 == 0);
    total += sizes[r];
  }
  // A gather, in any order: here the last rank's pack first.
  uint8_t *gathered = malloc(total);
  for (size_t r = N_RANKS, at = 0; r-- > 0; at += sizes[r]) memcpy(gathered + at, packs[r], sizes[r]);
  // A sum (dist_sum_i64): each rank's pack at its offset of a zeroed buffer.
  int64_t *summed = calloc(total / 8, 8);
  for (size_t r = 0, at = 0; r < N_RANKS; at += sizes[r], r++) {
    int64_t *mine = calloc(total / 8, 8);
    memcpy((uint8_t *)mine + at, packs[r], sizes[r]);
    for (size_t w = 0; w < total / 8; w++) summed[w] += mine[w];
    free(mine);
  }
  for (int way = 0; way < 2; way++) {
    CocoEvalMatches m;
    coco_eval_matches_init(&m);
    coco_eval_matches_unpack(&m, way ? (const uint8_t *)summed : gathered, total);
    CocoEvalResult parts;
    coco_eval_accumulate(&gt, &m, &parts);
    check_same_result(&parts, &whole);
    coco_eval_result_free(&parts);
    coco_eval_matches_free(&m);
  }
  for (int r = 0; r < N_RANKS; r++) free(packs[r]);
  free(gathered);
  free(summed);
  coco_eval_result_free(&whole);
  coco_gt_free(&gt);
  coco_dets_free(&d);
}

static void accumulate_twice(void *ctx) {
  (void)ctx;
  CocoGt gt;
  CocoDetections d;
  random_set(&gt, &d);
  size_t n;
  uint8_t *pack = rank_pack(&gt, &d, 0, &n);
  CocoEvalMatches m;
  coco_eval_matches_init(&m);
  coco_eval_matches_unpack(&m, pack, n);
  coco_eval_matches_unpack(&m, pack, n);
  CocoEvalResult r;
  coco_eval_accumulate(&gt, &m, &r);
}

static void image_on_two_ranks_is_an_error(void) {
  CHECK_DIES_WITH(accumulate_twice, NULL, "evaluated twice");
}

// ---------------------------------------------------------------- JSON

static void results_file_reads_back_the_same(void) {
  CocoGt gt;
  CocoDetections d, back;
  random_set(&gt, &d);
  det(&d, 10, 9, (double[]){0.1 + 0.2, 1.0 / 3, 1e-300, 123456.789}, 0.05 + 1e-17);
  const char *path = "/coco_results.json";
  char file[4096];
  snprintf(file, sizeof file, "%s%s", test_tmpdir(), path);
  coco_dets_write_json(&d, file);
  coco_dets_init(&back);
  coco_dets_load_json(&back, &gt, file);
  REQUIRE(back.n == d.n);
  CHECK(memcmp(back.dets, d.dets, (size_t)d.n * sizeof *d.dets) == 0);
  coco_dets_free(&back);
  coco_dets_free(&d);
  coco_gt_free(&gt);
}

int main(void) {
  TEST_RUN(perfect_detection_scores_one);
  TEST_RUN(crowd_only_image_is_undefined);
  TEST_RUN(crowd_absorbs_several_detections);
  TEST_RUN(detection_without_ground_truth_is_false_positive);
  TEST_RUN(images_without_annotations_may_be_left_out);
  TEST_RUN(no_detections_score_zero);
  TEST_RUN(area_range_is_the_annotation_area);
  TEST_RUN(max_dets_cut);
  TEST_RUN(ties_keep_the_order_given);
  TEST_RUN(ranks_combine_to_the_whole);
  TEST_RUN(image_on_two_ranks_is_an_error);
  TEST_RUN(results_file_reads_back_the_same);
  return test_finish();
}
