"""Bad input of build/bin/coco_eval (object_detection/coco_json.c): broken
annotation and results files, made under {tmp} from a good pair.

The good pair: images 1 and 5, categories 3 and 9, one annotation per image,
one result per image. A row's setup edits either side: gt(change) and
results(change) write the good pair with change(data) applied to that
side's parsed JSON; raw(name, text) writes one side as text as it is."""
import copy
import json

from case import Case

EVAL = "{build}/bin/coco_eval {tmp}/gt.json {tmp}/res.json"
GT = {"images": [{"id": 1, "width": 640, "height": 480}, {"id": 5, "width": 320, "height": 200}],
      "categories": [{"id": 3, "name": "a"}, {"id": 9, "name": "b"}],
      "annotations": [
          {"id": 1, "image_id": 1, "category_id": 3, "bbox": [10, 10, 50, 40], "area": 2000, "iscrowd": 0},
          {"id": 2, "image_id": 5, "category_id": 9, "bbox": [0, 0, 100, 120], "area": 12000, "iscrowd": 1}]}
NOT_ANNOTATIONS = ('not a COCO annotations file (want an object with "images", "categories" and '
                   '"annotations")')
NOT_RESULTS = 'not a results file (want an array of {{"image_id", "category_id", "bbox", "score"}})'
RESULTS = [{"image_id": 1, "category_id": 3, "bbox": [11, 10, 50, 40], "score": 0.9},
           {"image_id": 5, "category_id": 9, "bbox": [5, 5, 20, 20], "score": 0.4}]


def pair(gt_change=None, results_change=None):
    """A setup: the good pair, each side passed through its change (a function
    editing the parsed JSON in place) first."""
    def setup(t):
        gt, res = copy.deepcopy(GT), copy.deepcopy(RESULTS)
        if gt_change:
            gt_change(gt)
        if results_change:
            results_change(res)
        t.write("gt.json", json.dumps(gt))
        t.write("res.json", json.dumps(res))
    return setup


def gt(change):
    return pair(gt_change=change)


def results(change):
    return pair(results_change=change)


def raw(name, text):
    """A setup: the good pair with {tmp}/name written as text."""
    def setup(t):
        pair()(t)
        t.write(name, text)
    return setup


def setter(path, value):
    """A change: data[path[0]][path[1]]... = value (or deleted when value is
    DELETE)."""
    def change(data):
        for key in path[:-1]:
            data = data[key]
        if value is DELETE:
            del data[path[-1]]
        else:
            data[path[-1]] = value
    return change


DELETE = object()


def summary(ap):
    """A check: 12 summary lines, the first AP ap (as printed)."""
    def check(t, proc):
        lines = proc.stdout.splitlines()
        if len(lines) != 12 or not lines[0].endswith(f"= {ap}"):
            return f"want 12 lines, AP {ap}; got {proc.stdout!r}"
        return None
    return check


CASES = [
    Case("coco_eval_good_pair", EVAL, None, 0, "the good pair itself: one hit, one detection in a crowd (ignored)",
         setup=pair(), check=summary("1.000")),
    Case("coco_eval_no_results", EVAL, None, 0,
         "an empty results list: AP 0, as COCOeval gives with no detections (pycocotools' loadRes "
         "itself fails on [])", setup=raw("res.json", "[]"), check=summary("0.000")),
    Case("coco_eval_missing_annotations", "{build}/bin/coco_eval {tmp}/none.json {tmp}/res.json",
         "error: {tmp}/none.json: cannot open: No such file or directory", 2, "no annotations file",
         setup=pair()),
    Case("coco_eval_missing_results", "{build}/bin/coco_eval {tmp}/gt.json {tmp}/none.json",
         "error: {tmp}/none.json: cannot open: No such file or directory", 2, "no results file",
         setup=pair()),
    Case("coco_eval_one_argument", "{build}/bin/coco_eval {tmp}/gt.json",
         "error: coco_eval: usage: coco_eval ANNOTATIONS.json RESULTS.json [--digits=N]", 2,
         "the results file left out", setup=pair()),
    Case("coco_eval_bad_digits", EVAL + " --digits=18",
         "error: --digits: \"18\" is not an integer in [0, 17]", 2, "more digits than a double has",
         setup=pair()),
    Case("coco_eval_truncated_annotations", EVAL, "error: {tmp}/gt.json: not valid JSON (at byte 37)", 2,
         "an annotations file cut short (a copy that stopped)",
         setup=raw("gt.json", json.dumps(GT)[:40])),
    Case("coco_eval_results_trailing_text", EVAL, "error: {tmp}/res.json: not valid JSON (at byte 3)", 2,
         "a results file with more after its list (two files pasted together)",
         setup=raw("res.json", "[]\n[]\n")),
    Case("coco_eval_annotations_not_object", EVAL, "error: {tmp}/gt.json: " + NOT_ANNOTATIONS, 2,
         "the files given the other way round", setup=raw("gt.json", json.dumps(RESULTS))),
    Case("coco_eval_no_images", EVAL, "error: {tmp}/gt.json: no \"images\" array", 2,
         "an annotations file without its images (image_info files have no annotations, and the reverse)",
         setup=gt(setter(["images"], DELETE))),
    Case("coco_eval_image_twice", EVAL, "error: {tmp}/gt.json: image id 5 appears twice", 2,
         "two images with one id", setup=gt(setter(["images", 0, "id"], 5))),
    Case("coco_eval_annotation_unknown_image", EVAL,
         "error: {tmp}/gt.json: annotation 2: unknown image_id 7", 2,
         "an annotation of an image the file does not list",
         setup=gt(setter(["annotations", 1, "image_id"], 7))),
    Case("coco_eval_no_categories", EVAL,
         "error: {tmp}/gt.json: annotation 1: unknown category_id 3", 2,
         "annotations in a file whose category list is empty (the lookup in an empty list was "
         "undefined behaviour until 2026-11-30: fuzz finding 6)",
         setup=gt(setter(["categories"], []))),
    Case("coco_eval_annotation_no_area", EVAL,
         "error: {tmp}/gt.json: annotations[0]: \"area\" missing or not a number", 2,
         "an annotation without the area that picks its range", setup=gt(setter(["annotations", 0, "area"], DELETE))),
    Case("coco_eval_annotation_negative_height", EVAL,
         "error: {tmp}/gt.json: annotations[1]: bbox height -120 is negative", 2,
         "a ground-truth box of negative height", setup=gt(setter(["annotations", 1, "bbox", 3], -120))),
    Case("coco_eval_annotation_iscrowd_two", EVAL,
         "error: {tmp}/gt.json: annotations[0]: \"iscrowd\" 2 is not an integer in [0, 1]", 2,
         "iscrowd neither 0 nor 1", setup=gt(setter(["annotations", 0, "iscrowd"], 2))),
    Case("coco_eval_category_not_object", EVAL, "error: {tmp}/gt.json: categories[1]: not an object", 2,
         "a category given as a bare id", setup=gt(setter(["categories", 1], 9))),
    Case("coco_eval_results_not_list", EVAL, "error: {tmp}/res.json: " + NOT_RESULTS, 2,
         "an annotations file given as the results", setup=raw("res.json", json.dumps(GT))),
    Case("coco_eval_result_unknown_image", EVAL, "error: {tmp}/res.json: results[1]: unknown image_id 4", 2,
         "a result on an image the annotations do not list (pycocotools: an assertion)",
         setup=results(setter([1, "image_id"], 4))),
    Case("coco_eval_result_unknown_category", EVAL,
         "error: {tmp}/res.json: results[0]: unknown category_id 80", 2,
         "a result in a category the annotations do not list: a contiguous 0..79 label not mapped "
         "back to COCO's ids (pycocotools leaves it out silently)",
         setup=results(setter([0, "category_id"], 80))),
    Case("coco_eval_result_negative_width", EVAL,
         "error: {tmp}/res.json: results[0]: bbox width -50 is negative", 2,
         "a box given as [x1, y1, x2, y2] the wrong way round", setup=results(setter([0, "bbox", 2], -50))),
    Case("coco_eval_result_bbox_three_numbers", EVAL,
         "error: {tmp}/res.json: results[1]: \"bbox\" missing or not [x, y, width, height]", 2,
         "a box of three numbers", setup=results(setter([1, "bbox"], [5, 5, 20]))),
    Case("coco_eval_result_no_score", EVAL,
         "error: {tmp}/res.json: results[1]: \"score\" missing or not a number", 2,
         "a result without a score", setup=results(setter([1, "score"], DELETE))),
    Case("coco_eval_result_score_infinite", EVAL,
         "error: {tmp}/res.json: results[0]: \"score\" is not finite", 2,
         "a score that overflows a double (1e999)",
         setup=raw("res.json", json.dumps(RESULTS).replace("0.9", "1e999"))),
    Case("coco_eval_result_fractional_image_id", EVAL,
         "error: {tmp}/res.json: results[0]: \"image_id\" 1.5 is not an integer in [0, 9007199254740992]", 2,
         "an image id that is not a whole number", setup=results(setter([0, "image_id"], 1.5))),
]
