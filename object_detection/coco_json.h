// coco_json.h: COCO's JSON files for the evaluation (coco_eval.h): an
// instances_*.json read into a CocoGt, a results file read into
// CocoDetections, and detections written as a results file
// ([{"image_id", "category_id", "bbox": [x, y, w, h], "score"}], what
// pycocotools' loadRes reads). Bad input is a one-line error naming the
// file, the item (annotations[3], results[7]) and the problem.
#pragma once
#include "object_detection/coco_eval.h"

#ifdef __cplusplus
extern "C" {
#endif

// Reads "images" (id, width, height), "categories" (id, name) and
// "annotations" (id, image_id, category_id, bbox, area, iscrowd) of the file
// into gt (initialised here) and indexes it; other fields are not read.
void coco_gt_load_json(CocoGt *gt, const char *path);

// Appends the results in the file to dets (initialised by the caller). A
// result must name an image and a category of gt and a box of width and
// height >= 0; pycocotools leaves results of unknown categories out, here
// they are an error, as they can only be a mistake.
void coco_dets_load_json(CocoDetections *dets, const CocoGt *gt, const char *path);

// Writes dets to path as a results file, whole or not at all, one result a
// line; numbers are written so that they read back as the same doubles
// (strtod, Python's float).
void coco_dets_write_json(const CocoDetections *dets, const char *path);

#ifdef __cplusplus
}
#endif
