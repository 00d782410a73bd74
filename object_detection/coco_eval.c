// coco_eval.c: COCO box mAP as pycocotools' COCOeval computes it
// (coco_eval.h). Comments name the pycocotools step each function follows.
#include "object_detection/coco_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/check.h"

_Static_assert(sizeof(CocoEvalDet) == 24, "CocoEvalDet packs as 24 bytes");
_Static_assert(sizeof(CocoEvalPair) == 40, "CocoEvalPair packs as 40 bytes");

static const int COCO_MAXDETS[COCO_N_MAXDET] = {1, 10, 100};
// Params.areaRng: 0^2, 32^2, 96^2, 1e5^2, bounds inclusive at both ends.
static const double COCO_AREA_RANGES[COCO_N_AREA][2] = {
    {0, 1e10}, {0, 1024}, {1024, 9216}, {9216, 1e10}};
static const char *const COCO_AREA_NAMES[COCO_N_AREA] = {"all", "small", "medium", "large"};

// ---------------------------------------------------------------- growth

// Grows *items (item_bytes each) to hold at least `need`, doubling.
static void coco_grow(void **items, int64_t *cap, int64_t need, size_t item_bytes) {
  if (need <= *cap) return;
  int64_t cap_new = *cap > 0 ? *cap : 16;
  while (cap_new < need) cap_new *= 2;
  void *p = realloc(*items, (size_t)cap_new * item_bytes);
  CHECK_TRUE(p != NULL, "out of memory");
  *items = p;
  *cap = cap_new;
}

#define COCO_PUSH(items, n, cap, value)                                 \
  do {                                                                  \
    coco_grow((void **)&(items), &(cap), (n) + 1, sizeof *(items));     \
    (items)[(n)++] = (value);                                           \
  } while (0)

// ---------------------------------------------------------------- ground truth

void coco_gt_init(CocoGt *gt) { memset(gt, 0, sizeof *gt); }

void coco_gt_free(CocoGt *gt) {
  for (int64_t i = 0; i < gt->n_categories; i++) free(gt->categories[i].name);
  free(gt->images);
  free(gt->categories);
  free(gt->annotations);
  free(gt->ann_order);
  free(gt->image_first);
  coco_gt_init(gt);
}

void coco_gt_add_image(CocoGt *gt, int64_t id, int32_t width, int32_t height) {
  CocoImage im = {.id = id, .width = width, .height = height};
  COCO_PUSH(gt->images, gt->n_images, gt->cap_images, im);
}

void coco_gt_add_category(CocoGt *gt, int64_t id, const char *name) {
  const char *text = name ? name : "";
  CocoCategory c = {.id = id, .name = xmalloc(strlen(text) + 1)};
  strcpy(c.name, text);
  COCO_PUSH(gt->categories, gt->n_categories, gt->cap_categories, c);
}

void coco_gt_add_annotation(CocoGt *gt, const CocoAnnotation *a) {
  COCO_PUSH(gt->annotations, gt->n_annotations, gt->cap_annotations, *a);
}

static int coco_cmp_i64(int64_t a, int64_t b) { return (a > b) - (a < b); }

static int coco_cmp_image(const void *a, const void *b) {
  return coco_cmp_i64(((const CocoImage *)a)->id, ((const CocoImage *)b)->id);
}

static int coco_cmp_category(const void *a, const void *b) {
  return coco_cmp_i64(((const CocoCategory *)a)->id, ((const CocoCategory *)b)->id);
}

// A sort key: annotations and detections sort by (image, category id, order
// added), matches by (category position, image id, order made). seq, the
// order, is last: qsort is not stable, and the key makes it so.
typedef struct CocoKey {
  int64_t major, minor, seq;
} CocoKey;

static int coco_cmp_key(const void *pa, const void *pb) {
  const CocoKey *a = pa, *b = pb;
  if (a->major != b->major) return coco_cmp_i64(a->major, b->major);
  if (a->minor != b->minor) return coco_cmp_i64(a->minor, b->minor);
  return coco_cmp_i64(a->seq, b->seq);
}

// Both searches return -1 on an empty list without calling bsearch, whose
// array may not be NULL even when it has no elements.
int64_t coco_gt_image_index(const CocoGt *gt, int64_t image_id) {
  if (gt->n_images == 0) return -1;
  CocoImage key = {.id = image_id};
  const CocoImage *hit = bsearch(&key, gt->images, (size_t)gt->n_images, sizeof key, coco_cmp_image);
  return hit ? hit - gt->images : -1;
}

int64_t coco_gt_category_index(const CocoGt *gt, int64_t category_id) {
  if (gt->n_categories == 0) return -1;
  CocoCategory key = {.id = category_id};
  const CocoCategory *hit =
      bsearch(&key, gt->categories, (size_t)gt->n_categories, sizeof key, coco_cmp_category);
  return hit ? hit - gt->categories : -1;
}

int64_t coco_gt_annotated_images(const CocoGt *gt, const int64_t *image_ids, int64_t n) {
  int64_t count = 0, images = image_ids ? n : gt->n_images;
  for (int64_t i = 0; i < images; i++) {
    int64_t image = image_ids ? coco_gt_image_index(gt, image_ids[i]) : i;
    count += image >= 0 && gt->image_first[image + 1] > gt->image_first[image];
  }
  return count;
}

static void coco_gt_sort_ids(CocoGt *gt, const char *source) {
  if (gt->n_images > 0) qsort(gt->images, (size_t)gt->n_images, sizeof *gt->images, coco_cmp_image);
  if (gt->n_categories > 0)
    qsort(gt->categories, (size_t)gt->n_categories, sizeof *gt->categories, coco_cmp_category);
  for (int64_t i = 1; i < gt->n_images; i++)
    if (gt->images[i].id == gt->images[i - 1].id)
      die_input(source, "image id %lld appears twice", (long long)gt->images[i].id);
  for (int64_t i = 1; i < gt->n_categories; i++)
    if (gt->categories[i].id == gt->categories[i - 1].id)
      die_input(source, "category id %lld appears twice", (long long)gt->categories[i].id);
}

void coco_gt_index(CocoGt *gt, const char *source) {
  coco_gt_sort_ids(gt, source);
  int64_t n = gt->n_annotations;
  CocoKey *keys = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *keys);
  free(gt->image_first);
  gt->image_first = xcalloc((size_t)gt->n_images + 1, sizeof *gt->image_first);
  for (int64_t i = 0; i < n; i++) {
    const CocoAnnotation *a = &gt->annotations[i];
    int64_t image = coco_gt_image_index(gt, a->image_id);
    if (image < 0)
      die_input(source, "annotation %lld: unknown image_id %lld", (long long)a->id,
                (long long)a->image_id);
    if (coco_gt_category_index(gt, a->category_id) < 0)
      die_input(source, "annotation %lld: unknown category_id %lld", (long long)a->id,
                (long long)a->category_id);
    keys[i] = (CocoKey){image, a->category_id, i};
    gt->image_first[image + 1]++;
  }
  if (n > 0) qsort(keys, (size_t)n, sizeof *keys, coco_cmp_key);
  for (int64_t i = 0; i < gt->n_images; i++) gt->image_first[i + 1] += gt->image_first[i];
  free(gt->ann_order);
  gt->ann_order = xmalloc((size_t)(n > 0 ? n : 1) * sizeof *gt->ann_order);
  for (int64_t i = 0; i < n; i++) gt->ann_order[i] = keys[i].seq;
  free(keys);
}

// ---------------------------------------------------------------- detections

void coco_dets_init(CocoDetections *d) { memset(d, 0, sizeof *d); }

void coco_dets_free(CocoDetections *d) {
  free(d->dets);
  coco_dets_init(d);
}

void coco_dets_add(CocoDetections *d, const CocoDetection *det) {
  COCO_PUSH(d->dets, d->n, d->cap, *det);
}

// ---------------------------------------------------------------- per image

// np.linspace(start, stop, num) as numpy computes it (i * step + start, the
// last point exactly stop): the thresholds must be the same doubles, or an
// IoU or recall that lands on one falls on the other side.
static void coco_linspace(double start, double stop, int num, double *out) {
  double step = (stop - start) / (num - 1);
  for (int i = 0; i < num; i++) out[i] = i * step + start;
  out[num - 1] = stop;
}

// maskApi.c bbIou: a crowd region's union is the detection's area alone, so
// a detection inside a crowd scores 1 however large the crowd.
static double coco_iou(const double d[4], const double g[4], bool crowd) {
  double w = fmin(d[2] + d[0], g[2] + g[0]) - fmax(d[0], g[0]);
  if (w <= 0) return 0;
  double h = fmin(d[3] + d[1], g[3] + g[1]) - fmax(d[1], g[1]);
  if (h <= 0) return 0;
  double inter = w * h, det_area = d[2] * d[3];
  return inter / (crowd ? det_area : det_area + g[2] * g[3] - inter);
}

static bool coco_outside(double area, int range) {
  return area < COCO_AREA_RANGES[range][0] || area > COCO_AREA_RANGES[range][1];
}

// A detection to rank by score, highest first, equal scores in seq order:
// numpy's stable argsort of -score (mergesort) in pycocotools.
typedef struct CocoRanked {
  double score;
  int64_t seq;
} CocoRanked;

static int coco_cmp_ranked(const void *pa, const void *pb) {
  const CocoRanked *a = pa, *b = pb;
  if (a->score != b->score) return a->score < b->score ? 1 : -1;
  return coco_cmp_i64(a->seq, b->seq);
}

static void coco_rank(CocoRanked *r, int64_t n) {
  if (n > 0) qsort(r, (size_t)n, sizeof *r, coco_cmp_ranked);
}

// One (image, category): its ground truths, its detections (best first) and
// their IoUs (n_dets, n_gts).
typedef struct CocoPairInput {
  const CocoAnnotation **gts;
  int64_t n_gts;
  const CocoDetection **dets;
  int64_t n_dets;
  const double *ious;
} CocoPairInput;

// evaluateImg for one area range and IoU threshold: each detection, best
// first, takes the best still-free ground truth at IoU >= thr, preferring
// countable ground truths (listed first) to ignored ones; crowds stay free.
static void coco_match(const CocoPairInput *in, const int64_t *order, const bool *ignore,
                       double thr, bool *taken, int64_t *match) {
  memset(taken, 0, (size_t)in->n_gts * sizeof *taken);
  for (int64_t d = 0; d < in->n_dets; d++) {
    double best = fmin(thr, 1 - 1e-10);
    int64_t m = -1;
    for (int64_t j = 0; j < in->n_gts; j++) {
      int64_t g = order[j];
      if (taken[g] && !in->gts[g]->iscrowd) continue;
      if (m > -1 && !ignore[m] && ignore[g]) break;
      if (in->ious[d * in->n_gts + g] < best) continue;
      best = in->ious[d * in->n_gts + g];
      m = g;
    }
    if (m >= 0) taken[m] = true;
    match[d] = m;
  }
}

// evaluateImg for one area range: which ground truths count, then each
// threshold's matches as the detections' bits.
static int32_t coco_match_area(const CocoPairInput *in, int area, const double *iou_thrs,
                               CocoEvalDet *out) {
  int64_t G = in->n_gts;
  int64_t *order = xmalloc((size_t)(G + in->n_dets + 1) * sizeof *order);
  int64_t *match = order + G;
  bool *ignore = xmalloc((size_t)(2 * G + 1) * sizeof *ignore);
  bool *taken = ignore + G;
  int32_t n_regular = 0;
  for (int64_t g = 0; g < G; g++) {
    ignore[g] = in->gts[g]->iscrowd || coco_outside(in->gts[g]->area, area);
    if (!ignore[g]) order[n_regular++] = g;
  }
  for (int64_t g = 0, j = n_regular; g < G; g++)
    if (ignore[g]) order[j++] = g;
  for (int t = 0; t < COCO_N_IOU; t++) {
    coco_match(in, order, ignore, iou_thrs[t], taken, match);
    for (int64_t d = 0; d < in->n_dets; d++) {
      int64_t m = match[d];
      // pycocotools keeps the matched annotation's id and reads 0 as none.
      bool matched = m >= 0 && in->gts[m]->id != 0;
      const double *b = in->dets[d]->bbox;
      bool ignored = (m >= 0 && ignore[m]) || (!matched && coco_outside(b[2] * b[3], area));
      out[d].matched[area] |= (uint16_t)(matched << t);
      out[d].ignored[area] |= (uint16_t)(ignored << t);
    }
  }
  free(order);
  free(ignore);
  return n_regular;
}

// evaluateImg for one (image, category) in every area range: appends its
// pair and its best COCO_MAX_DETS detections to out.
static void coco_eval_pair(int64_t image_id, int64_t category_id, CocoPairInput *in,
                           const double *iou_thrs, CocoEvalMatches *out) {
  if (in->n_dets > COCO_MAX_DETS) in->n_dets = COCO_MAX_DETS;
  double *ious = xmalloc((size_t)(in->n_dets * in->n_gts + 1) * sizeof *ious);
  for (int64_t d = 0; d < in->n_dets; d++)
    for (int64_t g = 0; g < in->n_gts; g++)
      ious[d * in->n_gts + g] = coco_iou(in->dets[d]->bbox, in->gts[g]->bbox, in->gts[g]->iscrowd);
  in->ious = ious;
  CocoEvalDet dets[COCO_MAX_DETS];
  memset(dets, 0, sizeof dets);
  CocoEvalPair pair = {.image_id = image_id, .category_id = category_id, .n_dets = in->n_dets};
  for (int a = 0; a < COCO_N_AREA; a++) pair.n_gts[a] = coco_match_area(in, a, iou_thrs, dets);
  COCO_PUSH(out->pairs, out->n_pairs, out->cap_pairs, pair);
  for (int64_t d = 0; d < in->n_dets; d++) {
    dets[d].score = in->dets[d]->score;
    COCO_PUSH(out->dets, out->n_dets, out->cap_dets, dets[d]);
  }
  free(ious);
}

// One image: its annotations and detection keys, both ordered by category,
// walked together category by category.
static void coco_eval_image(const CocoGt *gt, int64_t image, const CocoDetections *dets,
                            const CocoKey *keys, int64_t n_keys, const double *iou_thrs,
                            CocoEvalMatches *out) {
  int64_t a = gt->image_first[image], a_end = gt->image_first[image + 1], k = 0;
  int64_t n_max = (a_end - a) + n_keys + 1;
  const CocoAnnotation **gts = xmalloc((size_t)n_max * sizeof *gts);
  const CocoDetection **ds = xmalloc((size_t)n_max * sizeof *ds);
  CocoRanked *ranked = xmalloc((size_t)n_max * sizeof *ranked);
  while (a < a_end || k < n_keys) {
    int64_t cat = a < a_end ? gt->annotations[gt->ann_order[a]].category_id : INT64_MAX;
    if (k < n_keys && keys[k].minor < cat) cat = keys[k].minor;
    CocoPairInput in = {.gts = gts, .dets = ds};
    for (; a < a_end && gt->annotations[gt->ann_order[a]].category_id == cat; a++)
      gts[in.n_gts++] = &gt->annotations[gt->ann_order[a]];
    int64_t n_ranked = 0;
    for (; k < n_keys && keys[k].minor == cat; k++)
      ranked[n_ranked++] = (CocoRanked){dets->dets[keys[k].seq].score, keys[k].seq};
    coco_rank(ranked, n_ranked);
    for (int64_t i = 0; i < n_ranked; i++) ds[in.n_dets++] = &dets->dets[ranked[i].seq];
    if (coco_gt_category_index(gt, cat) >= 0)
      coco_eval_pair(gt->images[image].id, cat, &in, iou_thrs, out);
  }
  free(gts);
  free(ds);
  free(ranked);
}

// The first key of image_id in keys (sorted), or n when none.
static int64_t coco_keys_lower_bound(const CocoKey *keys, int64_t n, int64_t image_id) {
  int64_t lo = 0, hi = n;
  while (lo < hi) {
    int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid].major < image_id) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

void coco_eval_images(const CocoGt *gt, const CocoDetections *dets, const int64_t *image_ids,
                      int64_t n_images, CocoEvalMatches *out) {
  double iou_thrs[COCO_N_IOU];
  coco_linspace(0.5, 0.95, COCO_N_IOU, iou_thrs);
  // Detections keyed by image id (not position: they may name images this
  // call is not asked about).
  CocoKey *keys = xmalloc((size_t)(dets->n + 1) * sizeof *keys);
  for (int64_t i = 0; i < dets->n; i++)
    keys[i] = (CocoKey){dets->dets[i].image_id, dets->dets[i].category_id, i};
  if (dets->n > 0) qsort(keys, (size_t)dets->n, sizeof *keys, coco_cmp_key);
  for (int64_t i = 0; i < n_images; i++) {
    int64_t image = coco_gt_image_index(gt, image_ids[i]);
    if (image < 0) DIE("coco_eval_images: image id %lld is not in the ground truth", (long long)image_ids[i]);
    int64_t first = coco_keys_lower_bound(keys, dets->n, image_ids[i]);
    int64_t last = coco_keys_lower_bound(keys + first, dets->n - first, image_ids[i] + 1) + first;
    coco_eval_image(gt, image, dets, keys + first, last - first, iou_thrs, out);
  }
  free(keys);
}

// ---------------------------------------------------------------- matches

void coco_eval_matches_init(CocoEvalMatches *m) { memset(m, 0, sizeof *m); }

void coco_eval_matches_free(CocoEvalMatches *m) {
  free(m->pairs);
  free(m->dets);
  coco_eval_matches_init(m);
}

uint8_t *coco_eval_matches_pack(const CocoEvalMatches *m, size_t *n_bytes) {
  size_t pair_bytes = (size_t)m->n_pairs * sizeof *m->pairs;
  size_t det_bytes = (size_t)m->n_dets * sizeof *m->dets;
  int64_t header[2] = {m->n_pairs, m->n_dets};
  *n_bytes = sizeof header + pair_bytes + det_bytes;
  uint8_t *bytes = xmalloc(*n_bytes);
  memcpy(bytes, header, sizeof header);
  if (pair_bytes) memcpy(bytes + sizeof header, m->pairs, pair_bytes);
  if (det_bytes) memcpy(bytes + sizeof header + pair_bytes, m->dets, det_bytes);
  return bytes;
}

void coco_eval_matches_unpack(CocoEvalMatches *m, const uint8_t *bytes, size_t n_bytes) {
  size_t at = 0;
  while (at < n_bytes) {
    int64_t header[2];
    if (n_bytes - at < sizeof header) DIE("coco_eval_matches_unpack: a cut header at byte %zu", at);
    memcpy(header, bytes + at, sizeof header);
    at += sizeof header;
    size_t left = n_bytes - at;
    if (header[0] < 0 || header[1] < 0 || (uint64_t)header[0] > left / sizeof(CocoEvalPair) ||
        (uint64_t)header[1] > (left - (size_t)header[0] * sizeof(CocoEvalPair)) / sizeof(CocoEvalDet))
      DIE("coco_eval_matches_unpack: counts %lld, %lld do not fit %zu bytes", (long long)header[0],
          (long long)header[1], left);
    coco_grow((void **)&m->pairs, &m->cap_pairs, m->n_pairs + header[0], sizeof *m->pairs);
    coco_grow((void **)&m->dets, &m->cap_dets, m->n_dets + header[1], sizeof *m->dets);
    size_t pair_bytes = (size_t)header[0] * sizeof(CocoEvalPair);
    size_t det_bytes = (size_t)header[1] * sizeof(CocoEvalDet);
    if (pair_bytes) memcpy(m->pairs + m->n_pairs, bytes + at, pair_bytes);
    if (det_bytes) memcpy(m->dets + m->n_dets, bytes + at + pair_bytes, det_bytes);
    m->n_pairs += header[0];
    m->n_dets += header[1];
    at += pair_bytes + det_bytes;
  }
}

// ---------------------------------------------------------------- accumulate

static size_t coco_precision_at(int64_t K, int t, int r, int64_t k, int a, int m) {
  return ((((size_t)t * COCO_N_RECALL + (size_t)r) * (size_t)K + (size_t)k) * COCO_N_AREA +
          (size_t)a) * COCO_N_MAXDET + (size_t)m;
}

static size_t coco_recall_at(int64_t K, int t, int64_t k, int a, int m) {
  return (((size_t)t * (size_t)K + (size_t)k) * COCO_N_AREA + (size_t)a) * COCO_N_MAXDET + (size_t)m;
}

// The pairs of one category, in ascending image id (the order pycocotools
// concatenates images in, which breaks ties of equal scores across images).
typedef struct CocoCategoryPairs {
  const CocoEvalPair **pairs;
  const CocoEvalDet **first_det;  // each pair's first detection
  int64_t n;
} CocoCategoryPairs;

// accumulate's inner loop for one threshold, area range and maxDets: the
// cumulative true and false positives along the ranked detections, recall
// and the precision envelope read at the 101 recall points.
static double coco_curve(const CocoEvalDet *const *ranked, int64_t nd, int t, int a, int64_t npig,
                         const double *rec_thrs, double *rc, double *pr, double *q) {
  double tp = 0, fp = 0;
  for (int64_t i = 0; i < nd; i++) {
    bool matched = (ranked[i]->matched[a] >> t) & 1, ignored = (ranked[i]->ignored[a] >> t) & 1;
    tp += matched && !ignored;
    fp += !matched && !ignored;
    rc[i] = tp / (double)npig;
    pr[i] = tp / (fp + tp + 0x1p-52);  // np.spacing(1)
  }
  for (int64_t i = nd - 1; i > 0; i--)
    if (pr[i] > pr[i - 1]) pr[i - 1] = pr[i];
  // np.searchsorted(rc, rec_thrs, side="left"); points past the last recall stay 0.
  int64_t i = 0;
  for (int r = 0; r < COCO_N_RECALL; r++) {
    while (i < nd && rc[i] < rec_thrs[r]) i++;
    q[r] = i < nd ? pr[i] : 0;
  }
  return nd > 0 ? rc[nd - 1] : 0;
}

// accumulate for one category and maxDets: its detections ranked over all
// images, then each area range and threshold.
static void coco_accumulate_category(const CocoCategoryPairs *cp, int64_t k, int mi,
                                     const double *rec_thrs, CocoEvalResult *r) {
  int64_t n = 0;
  for (int64_t p = 0; p < cp->n; p++) n += cp->pairs[p]->n_dets < COCO_MAXDETS[mi] ? cp->pairs[p]->n_dets : COCO_MAXDETS[mi];
  CocoRanked *ranked = xmalloc((size_t)(n + 1) * sizeof *ranked);
  const CocoEvalDet **items = xmalloc((size_t)(n + 1) * sizeof *items);
  const CocoEvalDet **sorted = xmalloc((size_t)(n + 1) * sizeof *sorted);
  double *rc = xmalloc((size_t)(2 * n + 1) * sizeof *rc), *pr = rc + n;
  int64_t at = 0;
  for (int64_t p = 0; p < cp->n; p++)
    for (int64_t d = 0; d < cp->pairs[p]->n_dets && d < COCO_MAXDETS[mi]; d++, at++) {
      items[at] = cp->first_det[p] + d;
      ranked[at] = (CocoRanked){items[at]->score, at};
    }
  coco_rank(ranked, n);
  for (int64_t i = 0; i < n; i++) sorted[i] = items[ranked[i].seq];
  for (int a = 0; a < COCO_N_AREA; a++) {
    int64_t npig = 0;
    for (int64_t p = 0; p < cp->n; p++) npig += cp->pairs[p]->n_gts[a];
    if (npig == 0) continue;  // undefined: stays -1
    for (int t = 0; t < COCO_N_IOU; t++) {
      double q[COCO_N_RECALL];
      r->recall[coco_recall_at(r->n_categories, t, k, a, mi)] =
          coco_curve(sorted, n, t, a, npig, rec_thrs, rc, pr, q);
      for (int ri = 0; ri < COCO_N_RECALL; ri++)
        r->precision[coco_precision_at(r->n_categories, t, ri, k, a, mi)] = q[ri];
    }
  }
  free(ranked);
  free(items);
  free(sorted);
  free(rc);
}

// The pairs' keys (category position, image id, pair index), sorted; a pair
// made twice is an internal error.
static CocoKey *coco_pair_keys(const CocoGt *gt, const CocoEvalMatches *m) {
  CocoKey *keys = xmalloc((size_t)(m->n_pairs + 1) * sizeof *keys);
  for (int64_t p = 0; p < m->n_pairs; p++) {
    int64_t k = coco_gt_category_index(gt, m->pairs[p].category_id);
    if (k < 0) DIE("coco_eval_accumulate: category %lld is not in the ground truth", (long long)m->pairs[p].category_id);
    keys[p] = (CocoKey){k, m->pairs[p].image_id, p};
  }
  if (m->n_pairs > 0) qsort(keys, (size_t)m->n_pairs, sizeof *keys, coco_cmp_key);
  for (int64_t p = 1; p < m->n_pairs; p++)
    if (keys[p].major == keys[p - 1].major && keys[p].minor == keys[p - 1].minor)
      DIE("coco_eval_accumulate: image %lld, category %lld evaluated twice",
          (long long)keys[p].minor, (long long)m->pairs[keys[p].seq].category_id);
  return keys;
}

static void coco_eval_stats(CocoEvalResult *r);

void coco_eval_accumulate(const CocoGt *gt, const CocoEvalMatches *m, CocoEvalResult *r) {
  int64_t K = gt->n_categories;
  size_t n_prec = (size_t)COCO_N_IOU * COCO_N_RECALL * (size_t)K * COCO_N_AREA * COCO_N_MAXDET;
  size_t n_rec = (size_t)COCO_N_IOU * (size_t)K * COCO_N_AREA * COCO_N_MAXDET;
  r->n_categories = K;
  r->precision = xmalloc((n_prec + 1) * sizeof *r->precision);
  r->recall = xmalloc((n_rec + 1) * sizeof *r->recall);
  for (size_t i = 0; i < n_prec; i++) r->precision[i] = -1;
  for (size_t i = 0; i < n_rec; i++) r->recall[i] = -1;
  double rec_thrs[COCO_N_RECALL];
  coco_linspace(0.0, 1.0, COCO_N_RECALL, rec_thrs);
  // Each pair's first detection: the pairs' detections follow one another.
  const CocoEvalDet **first = xmalloc((size_t)(m->n_pairs + 1) * sizeof *first);
  int64_t at = 0;
  for (int64_t p = 0; p < m->n_pairs; p++) {
    // With no detections at all m->dets may be NULL, and NULL + 0 is
    // undefined behaviour in C.
    first[p] = m->dets ? m->dets + at : NULL;
    at += m->pairs[p].n_dets;
  }
  if (at != m->n_dets) DIE("coco_eval_accumulate: the pairs hold %lld detections, not %lld", (long long)at, (long long)m->n_dets);
  CocoKey *keys = coco_pair_keys(gt, m);
  CocoCategoryPairs cp = {.pairs = xmalloc((size_t)(m->n_pairs + 1) * sizeof *cp.pairs),
                          .first_det = xmalloc((size_t)(m->n_pairs + 1) * sizeof *cp.first_det)};
  for (int64_t p = 0, k = 0; k < K; k++) {
    for (cp.n = 0; p < m->n_pairs && keys[p].major == k; p++, cp.n++) {
      cp.pairs[cp.n] = &m->pairs[keys[p].seq];
      cp.first_det[cp.n] = first[keys[p].seq];
    }
    if (cp.n == 0) continue;  // no ground truth, no detection: stays -1
    for (int mi = 0; mi < COCO_N_MAXDET; mi++) coco_accumulate_category(&cp, k, mi, rec_thrs, r);
  }
  free(cp.pairs);
  free(cp.first_det);
  free(keys);
  free(first);
  coco_eval_stats(r);
}

void coco_eval_result_free(CocoEvalResult *r) {
  free(r->precision);
  free(r->recall);
  memset(r, 0, sizeof *r);
}

// ---------------------------------------------------------------- summarize

// One line of summarize(): AP or AR, at one threshold (-1: all), area range
// and maxDets.
typedef struct CocoStatSpec {
  bool ap;
  int iou, area, maxdet;
} CocoStatSpec;

static const CocoStatSpec COCO_STAT_SPECS[COCO_N_STATS] = {
    {true, -1, 0, 2}, {true, 0, 0, 2},   {true, 5, 0, 2},   {true, -1, 1, 2},
    {true, -1, 2, 2}, {true, -1, 3, 2},  {false, -1, 0, 0}, {false, -1, 0, 1},
    {false, -1, 0, 2}, {false, -1, 1, 2}, {false, -1, 2, 2}, {false, -1, 3, 2}};

// The mean of the defined (> -1) values a spec selects; -1 when none is.
static double coco_stat(const CocoEvalResult *r, CocoStatSpec s) {
  double sum = 0;
  int64_t n = 0, K = r->n_categories;
  for (int t = 0; t < COCO_N_IOU; t++) {
    if (s.iou >= 0 && t != s.iou) continue;
    for (int64_t k = 0; k < K; k++)
      for (int ri = 0; ri < (s.ap ? COCO_N_RECALL : 1); ri++) {
        double v = s.ap ? r->precision[coco_precision_at(K, t, ri, k, s.area, s.maxdet)]
                        : r->recall[coco_recall_at(K, t, k, s.area, s.maxdet)];
        if (v > -1) sum += v, n++;
      }
  }
  return n > 0 ? sum / (double)n : -1;
}

static void coco_eval_stats(CocoEvalResult *r) {
  for (int i = 0; i < COCO_N_STATS; i++) r->stats[i] = coco_stat(r, COCO_STAT_SPECS[i]);
}

void coco_eval_print_stats(FILE *f, const double stats[COCO_N_STATS], int digits) {
  for (int i = 0; i < COCO_N_STATS; i++) {
    CocoStatSpec s = COCO_STAT_SPECS[i];
    const char *iou = s.iou < 0 ? "0.50:0.95" : s.iou == 0 ? "0.50" : "0.75";
    fprintf(f, " %-18s %s @[ IoU=%-9s | area=%6s | maxDets=%3d ] = %.*f\n",
            s.ap ? "Average Precision" : "Average Recall", s.ap ? "(AP)" : "(AR)", iou,
            COCO_AREA_NAMES[s.area], COCO_MAXDETS[s.maxdet], digits, stats[i]);
  }
}

void coco_eval_all(const CocoGt *gt, const CocoDetections *dets, CocoEvalResult *r) {
  int64_t *ids = xmalloc((size_t)(gt->n_images + 1) * sizeof *ids);
  for (int64_t i = 0; i < gt->n_images; i++) ids[i] = gt->images[i].id;
  CocoEvalMatches m;
  coco_eval_matches_init(&m);
  coco_eval_images(gt, dets, ids, gt->n_images, &m);
  coco_eval_accumulate(gt, &m, r);
  coco_eval_matches_free(&m);
  free(ids);
}
