// coco_eval.h: COCO box mAP, computed in process exactly as pycocotools'
// COCOeval (iouType "bbox", default parameters) computes it: per image and
// category the detections sorted by score (stable), the best 100 kept and
// matched greedily to the ground truth at IoU thresholds .50:.05:.95 in the
// four area ranges (all, small, medium, large; a ground truth's range from
// its "area" field, a detection's from w * h); then per category, area range
// and maxDets (1, 10, 100) the 101-point interpolated precision and the
// recall; then the 12 summary numbers of COCOeval.summarize().
//
// Three steps, so that ranks can share the work:
//   coco_eval_images      per image: matches -> CocoEvalMatches (a rank
//                         evaluates the images it scored)
//   coco_eval_matches_pack / _unpack
//                         the matches as bytes; packs concatenate, so ranks
//                         gather theirs on rank 0 (or every rank)
//   coco_eval_accumulate  all matches -> precision, recall, the 12 stats
// Every image must be evaluated on exactly one rank, those without
// detections too (their ground truth counts as missed); the result is then
// the same as one process evaluating every image (coco_eval_all), to the
// bit. The order in which matches arrive does not matter.
//
// Where pycocotools has quirks this keeps them: a crowd ground truth's IoU
// divides by the detection's area alone and can absorb several detections,
// which are then ignored; an annotation with id 0 counts as "no match"
// (pycocotools stores the matched annotation's id and tests it for 0);
// detections of a category the ground truth does not list are left out.
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  COCO_N_IOU = 10,      // IoU thresholds .50, .55, ..., .95
  COCO_N_RECALL = 101,  // recall points 0, .01, ..., 1
  COCO_N_AREA = 4,      // all, small (< 32^2), medium (32^2..96^2), large (> 96^2)
  COCO_N_MAXDET = 3,    // 1, 10, 100 detections per image and category
  COCO_MAX_DETS = 100,  // the most that are matched per image and category
  COCO_N_STATS = 12,    // AP, AP50, AP75, APs, APm, APl, AR1, AR10, AR100, ARs, ARm, ARl
};

typedef struct CocoImage {
  int64_t id;
  int32_t width, height;
} CocoImage;

typedef struct CocoCategory {
  int64_t id;  // COCO's are 1..90 with gaps
  char *name;  // owned; "" when the file gives none
} CocoCategory;

typedef struct CocoAnnotation {
  int64_t id, image_id, category_id;
  double bbox[4];  // x, y, width, height in pixels
  double area;     // the annotation's "area" (its segment's): picks the area range
  bool iscrowd;    // a crowd region: matches are ignored, not counted
} CocoAnnotation;

typedef struct CocoDetection {
  int64_t image_id, category_id;
  double bbox[4];  // x, y, width, height in pixels
  double score;
} CocoDetection;

// The ground truth. Add images, categories and annotations (or load an
// instances_*.json: coco_json.h), then coco_gt_index once before evaluating;
// it sorts images and categories by id and checks that ids are unique and
// every annotation names a known image and category.
typedef struct CocoGt {
  CocoImage *images;  // ascending id after coco_gt_index
  int64_t n_images, cap_images;
  CocoCategory *categories;  // ascending id after coco_gt_index
  int64_t n_categories, cap_categories;
  CocoAnnotation *annotations;  // in the order added
  int64_t n_annotations, cap_annotations;
  // The index: annotations ordered by (image, category, order added); those
  // of image i (its position in images) are ann_order[image_first[i] ..
  // image_first[i + 1]).
  int64_t *ann_order;    // (n_annotations)
  int64_t *image_first;  // (n_images + 1)
} CocoGt;

void coco_gt_init(CocoGt *gt);
void coco_gt_free(CocoGt *gt);
void coco_gt_add_image(CocoGt *gt, int64_t id, int32_t width, int32_t height);
void coco_gt_add_category(CocoGt *gt, int64_t id, const char *name);
void coco_gt_add_annotation(CocoGt *gt, const CocoAnnotation *a);
// Builds the index. A duplicate image or category id, or an annotation of
// an unknown image or category, is a one-line error naming `source` (the
// file it came from) and the id.
void coco_gt_index(CocoGt *gt, const char *source);
// Positions in images / categories (after coco_gt_index); -1 when absent.
int64_t coco_gt_image_index(const CocoGt *gt, int64_t image_id);
int64_t coco_gt_category_index(const CocoGt *gt, int64_t category_id);
// How many of the images image_ids[0..n) (ids of gt's images; NULL: every
// image of gt) have at least one annotation, crowd or not (after
// coco_gt_index). An eval must score every such image; one without may be
// left out, as the MLPerf reference's eval set leaves them out.
int64_t coco_gt_annotated_images(const CocoGt *gt, const int64_t *image_ids, int64_t n);

// A growing list of detections, in the order added (the order breaks ties
// of equal scores, as the order of a results file does in pycocotools).
typedef struct CocoDetections {
  CocoDetection *dets;
  int64_t n, cap;
} CocoDetections;

void coco_dets_init(CocoDetections *d);
void coco_dets_free(CocoDetections *d);
void coco_dets_add(CocoDetections *d, const CocoDetection *det);

// One detection after matching, as accumulation needs it: its score and,
// per area range, bit t set when it matched a ground truth at IoU threshold
// t (matched) or is left out of the counts there (ignored: it matched a
// crowd or out-of-range ground truth, or matched nothing and lies outside
// the range itself). 24 bytes.
typedef struct CocoEvalDet {
  double score;
  uint16_t matched[COCO_N_AREA];
  uint16_t ignored[COCO_N_AREA];
} CocoEvalDet;

// One (image, category) with a ground truth or a detection: its n_dets
// (<= COCO_MAX_DETS) detections, best score first, and per area range how
// many of its ground truths count (neither crowd nor out of range). 40 bytes.
typedef struct CocoEvalPair {
  int64_t image_id, category_id, n_dets;
  int32_t n_gts[COCO_N_AREA];
} CocoEvalPair;

// Matches: pairs in the order made, and the detections of each pair after
// those of the pair before.
typedef struct CocoEvalMatches {
  CocoEvalPair *pairs;
  int64_t n_pairs, cap_pairs;
  CocoEvalDet *dets;
  int64_t n_dets, cap_dets;
} CocoEvalMatches;

void coco_eval_matches_init(CocoEvalMatches *m);
void coco_eval_matches_free(CocoEvalMatches *m);

// Matches the detections of the images image_ids[0..n_images) (each a gt
// image, each once) against their ground truth and appends a pair to out
// for every category with a ground truth or a detection there. Detections
// of other images are not looked at, so `dets` may hold a rank's own or
// every rank's.
void coco_eval_images(const CocoGt *gt, const CocoDetections *dets, const int64_t *image_ids,
                      int64_t n_images, CocoEvalMatches *out);

// The matches as bytes (malloc'd, *n_bytes a multiple of 8): a header of
// two int64 counts, the pairs, the detections; raw host structs, for ranks
// of one build. Packs put one after another unpack as their concatenation,
// so a gather of the ranks' packs is all the exchange needs; with only sums
// at hand (dist_sum_i64), each rank copies its pack to its offset of a
// zeroed buffer of the total size and the sum is the concatenation.
uint8_t *coco_eval_matches_pack(const CocoEvalMatches *m, size_t *n_bytes);
// Appends the matches of every pack in bytes[0..n_bytes) to m. Bytes that
// are not whole packs are an internal error.
void coco_eval_matches_unpack(CocoEvalMatches *m, const uint8_t *bytes, size_t n_bytes);

// What COCOeval.accumulate and summarize give.
typedef struct CocoEvalResult {
  int64_t n_categories;  // K: the ground truth's, ascending id
  // (COCO_N_IOU, COCO_N_RECALL, K, COCO_N_AREA, COCO_N_MAXDET), pycocotools'
  // eval["precision"]; -1 where a category has no countable ground truth.
  double *precision;
  // (COCO_N_IOU, K, COCO_N_AREA, COCO_N_MAXDET), eval["recall"]; -1 likewise.
  double *recall;
  double stats[COCO_N_STATS];  // COCOeval.stats; -1 where nothing defines one
} CocoEvalResult;

// Accumulates matches of every image (from all ranks) into r (freed with
// coco_eval_result_free). A pair made twice (an image evaluated on two
// ranks) is an internal error.
void coco_eval_accumulate(const CocoGt *gt, const CocoEvalMatches *m, CocoEvalResult *r);
void coco_eval_result_free(CocoEvalResult *r);

// One process, every image of gt: images, then accumulate.
void coco_eval_all(const CocoGt *gt, const CocoDetections *dets, CocoEvalResult *r);

// Prints the 12 stats as COCOeval.summarize() does, one line each, with
// `digits` decimals (pycocotools prints 3).
void coco_eval_print_stats(FILE *f, const double stats[COCO_N_STATS], int digits);

#ifdef __cplusplus
}
#endif
