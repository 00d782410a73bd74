"""Bad input of the COCO converter (coco_to_lmdb) on a tiny COCO tree made
under {tmp}/coco, and of the generator (coco_generate).

The good tree, both splits alike: images 1 (a.jpg) and 2 (b.jpg), 8x8 JPEGs
written with Pillow when a row runs; categories 3 and 7; annotation 10 (image
1, category 3, bbox [1, 1, 4, 4]) and 11 (image 2, category 7, the whole
image, iscrowd 1). A row's setup changes the train split: ann= replaces
annotation 10's fields, image= image 1's, files= maps a path under coco/ to
bytes, a function giving bytes, or None (left out)."""
import json

from case import Case, left_nothing, warned
from cases_datasets import cut_jpeg, encode

CONVERT = "{build}/bin/coco_to_lmdb --coco={tmp}/coco --out={tmp}/lmdb"
JSON = "{tmp}/coco/annotations/instances_train2017.json"


def dataset(ann=None, image=None, categories=None):
    images = [{"id": 1, "file_name": "a.jpg", "width": 8, "height": 8},
              {"id": 2, "file_name": "b.jpg", "width": 8, "height": 8}]
    anns = [{"id": 10, "image_id": 1, "category_id": 3, "bbox": [1, 1, 4, 4], "area": 16, "iscrowd": 0},
            {"id": 11, "image_id": 2, "category_id": 7, "bbox": [0, 0, 8, 8], "area": 64, "iscrowd": 1}]
    images[0].update(image or {})
    anns[0].update(ann or {})
    cats = categories or [{"id": 3, "name": "x", "supercategory": "s"}, {"id": 7, "name": "y", "supercategory": "s"}]
    return {"info": {}, "licenses": [], "images": images, "annotations": anns, "categories": cats}


def coco(ann=None, image=None, files=None, text=None, categories=None):
    """A setup: the good tree with train's changes; text(json_text) may
    rewrite train's JSON."""
    def setup(t):
        for split in ("train", "val"):
            d = dataset(ann, image, categories) if split == "train" else dataset()
            body = json.dumps(d)
            if split == "train" and text:
                body = text(body)
            t.write(f"coco/annotations/instances_{split}2017.json", body)
            for name, shade in (("a.jpg", 30), ("b.jpg", 60)):
                t.write(f"coco/{split}2017/{name}", encode(shade=shade))
        for rel, content in (files or {}).items():
            if content is None:
                (t.path / "coco" / rel).unlink()
            else:
                t.write("coco/" + rel, content() if callable(content) else content)
    return setup


no_output = left_nothing("lmdb/train", "lmdb/categories.json")


CASES = [
    Case("coco_box_outside_image", CONVERT,
         f"error: {JSON}: annotation 10 (image 1): bbox [5, 5, 6, 2] reaches outside the 8x8 image by more "
         "than 1 pixel", 2, "a box reaching 3 pixels past the image's right edge; nothing is written",
         setup=coco(ann={"bbox": [5, 5, 6, 2]}), check=no_output),
    Case("coco_box_clipped", CONVERT, None, 0,
         "a box reaching 0.5 pixel outside the image (float rounding): clipped, kept",
         setup=coco(ann={"bbox": [-0.5, 0, 8.4, 8]})),
    Case("coco_box_negative_width", CONVERT,
         f"error: {JSON}: annotation 10 (image 1): bbox [1, 1, -2, 3] has a negative width", 2,
         "a negative box width", setup=coco(ann={"bbox": [1, 1, -2, 3]})),
    Case("coco_box_zero_height", CONVERT, None, 0,
         "a box of height 0 (COCO train2017 has two): dropped with a warning",
         setup=coco(ann={"bbox": [1, 1, 3, 0]}),
         check=warned(f"warning: {JSON}: annotation 10 (image 1): bbox [1, 1, 3, 0] has no area; dropped")),
    Case("coco_box_not_four_numbers", CONVERT,
         f"error: {JSON}: annotation 10 (image 1): \"bbox\" is not 4 numbers [x, y, width, height]", 2,
         "a bbox of three numbers", setup=coco(ann={"bbox": [1, 1, 3]})),
    Case("coco_unknown_category", CONVERT,
         f"error: {JSON}: annotation 10 (image 1): category_id 4 is not among the categories", 2,
         "an annotation of a category the file does not list", setup=coco(ann={"category_id": 4})),
    Case("coco_annotation_of_missing_image", CONVERT,
         f"error: {JSON}: annotation 10: image_id 99 is not among the images", 2,
         "an annotation for an image id the file does not list", setup=coco(ann={"image_id": 99})),
    Case("coco_iscrowd_not_flag", CONVERT,
         f"error: {JSON}: annotation 10 (image 1): \"iscrowd\" is not 0 or 1", 2,
         "iscrowd 2", setup=coco(ann={"iscrowd": 2})),
    Case("coco_duplicate_image_id", CONVERT, f"error: {JSON}: image id 2 appears twice", 2,
         "two images of one id (the reference raises 'duplicated image record')",
         setup=coco(image={"id": 2})),
    Case("coco_missing_image_file", CONVERT,
         "error: {tmp}/coco/train2017/a.jpg: image 1: No such file or directory", 2,
         "an image of the JSON without its file; nothing is written",
         setup=coco(files={"train2017/a.jpg": None}), check=no_output),
    Case("coco_image_not_jpeg", CONVERT,
         "error: {tmp}/coco/train2017/a.jpg: image 1: not a JPEG or PNG image (6 bytes starting 68 65 6c 6c)", 2,
         "a text file where a JPEG belongs", setup=coco(files={"train2017/a.jpg": "hello\n"}), check=no_output),
    Case("coco_image_truncated", CONVERT,
         "error: {tmp}/coco/train2017/a.jpg: image 1: JPEG decode: Premature end of JPEG file (corrupt or "
         "truncated; --accept_warnings keeps such files)", 2, "a JPEG cut short",
         setup=coco(files={"train2017/a.jpg": cut_jpeg})),
    Case("coco_image_size_differs", CONVERT,
         f"error: {{tmp}}/coco/train2017/a.jpg: image 1: 16x16 pixels, but {JSON} says 8x8", 2,
         "an image file of another size than the JSON's (the boxes would be scaled wrong)",
         setup=coco(files={"train2017/a.jpg": lambda: encode(side=16)})),
    Case("coco_json_truncated", CONVERT, f"error: {JSON}: the JSON ends inside a value after 300 bytes (truncated?)", 2,
         "an annotation file cut short (an interrupted download)",
         setup=coco(text=lambda body: body[:300])),
    Case("coco_json_malformed", CONVERT, f"error: {JSON}: not valid JSON at line 2, column 11 (byte 24)", 2,
         "a JSON with a missing colon", setup=coco(text=lambda body: '{"info": {},\n "images" [] }')),
    Case("coco_json_not_coco", CONVERT,
         f"error: {JSON}: no \"categories\" array at the top level (not a COCO instances file?)", 2,
         "a JSON object without COCO's arrays", setup=coco(text=lambda body: '{"data": []}')),
    Case("coco_json_missing", CONVERT,
         f"error: {JSON}: cannot open: No such file or directory", 2, "no train annotations",
         setup=coco(files={"annotations/instances_train2017.json": None})),
    Case("coco_categories_differ", CONVERT,
         "error: {tmp}/coco/annotations/instances_val2017.json: category 1 is id 3, in "
         f"{JSON} id 7: the labels would differ", 2, "train and val list their categories in other orders",
         setup=coco(categories=[{"id": 7, "name": "y"}, {"id": 3, "name": "x"}])),
    Case("coco_out_holds_val", CONVERT,
         "error: {tmp}/lmdb/val: already exists; remove it first (or leave val out of --split)", 2,
         "val of an earlier run in --out", setup=lambda t: [coco()(t), (t.path / "lmdb/val").mkdir(parents=True)] and None),
    Case("coco_split_unknown", CONVERT + " --split=test", "error: --split: 'test' is not one of train|val|both", 2,
         "a split COCO's layout has no files for", setup=coco()),
    Case("coco_val_images_unknown", CONVERT + " --val_images=boxed",
         "error: --val_images: 'boxed' is not one of all|annotated", 2,
         "a val filter other than all or the reference's annotated images", setup=coco()),
    Case("coco_generate_photos_missing", "{build}/bin/coco_generate --out={tmp}/out --photos={tmp}/none",
         "error: --photos: '{tmp}/none': No such file or directory (Debian's opencv-doc puts photos in "
         "/usr/share/doc/opencv-doc/examples/data)", 2, "no photo folder (opencv-doc not installed)"),
    Case("coco_generate_out_holds_annotations", "{build}/bin/coco_generate --out={tmp}/out",
         "error: {tmp}/out/annotations: already exists; remove it first", 2,
         "annotations of an earlier run in --out", setup=lambda t: (t.path / "out/annotations").mkdir(parents=True)),
]
