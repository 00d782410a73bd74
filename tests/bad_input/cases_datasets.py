"""Bad input of the image-classification converters: imagenet_to_lmdb on tiny
raw ImageNet trees made under {tmp}/raw, and fmnist_to_imagenet on
Fashion-MNIST (Debian dataset-fashion-mnist) or on IDX files made here.

The good tree: train/n01/a.JPEG, train/n02/b.JPEG and a flat val/ with
v1.JPEG (n01) and v2.JPEG (n02) labelled by LOC_val_solution.csv, 8x8 JPEGs
written with Pillow when a row runs (loading the table needs no Pillow). A
row's setup changes the tree: a path mapped to text, bytes or a function
giving bytes is written, to None left out, to DIR made a folder."""
import gzip
import io
import os
import struct
from pathlib import Path

from case import Case

CONVERT = "{build}/bin/imagenet_to_lmdb --root={tmp}/raw --out={tmp}/lmdb"
WANT_SPLITS = "want train, val or train,val"
CSV = "ImageId,PredictionString\nv1,n01 0 0 7 7\nv2,n02 0 0 7 7\n"
DIR = object()
NO_FLAT_VAL = {"val/v1.JPEG": None, "val/v2.JPEG": None}
FMNIST_SRC = Path("/usr/share/datasets/fashion-mnist")
FMNIST = "{build}/bin/fmnist_to_imagenet --out={tmp}/out"


def encode(fmt="JPEG", shade=100, side=8):
    """A side x side image of a pattern that JPEG does not squeeze to nothing."""
    from PIL import Image  # Pillow: scripts/deps.sh
    pixels = bytes((i * 7 + shade * (i // 3 % side)) % 256 for i in range(side * side * 3))
    buf = io.BytesIO()
    Image.frombytes("RGB", (side, side), pixels).save(buf, fmt)
    return buf.getvalue()


def cut_jpeg():
    whole = encode(side=64)
    return whole[:len(whole) * 2 // 3]


def image(fmt="JPEG", shade=100):
    return lambda: encode(fmt, shade)


def tree(*changes):
    """A setup: the good tree under {tmp}/raw with changes, dicts of path
    relative to raw/ -> content."""
    def setup(t):
        files = {"train/n01/a.JPEG": image(shade=10), "train/n02/b.JPEG": image(shade=20),
                 "val/v1.JPEG": image(shade=30), "val/v2.JPEG": image(shade=40),
                 "LOC_val_solution.csv": CSV}
        for change in changes:
            files.update(change)
        for rel, content in files.items():
            if content is DIR:
                (t.path / "raw" / rel).mkdir(parents=True, exist_ok=True)
            elif content is not None:
                t.write("raw/" + rel, content() if callable(content) else content)
    return setup


def then(setup, action):
    """A setup: setup, then action(t)."""
    def both(t):
        setup(t)
        action(t)
    return both


def absent(rel, why):
    """A check: {tmp}/rel must not exist after the run."""
    return lambda t, proc: f"{why}: {rel} exists" if (t.path / rel).exists() else None


def converted(val_images):
    """A check: the run wrote classes.txt and val_images val records."""
    def check(t, proc):
        classes = t.path / "lmdb" / "classes.txt"
        if not classes.exists() or classes.read_text() != "0 n01\n1 n02\n":
            return "classes.txt missing or wrong"
        if f"val: {val_images} images" not in proc.stdout:
            return f"stdout lacks 'val: {val_images} images': {proc.stdout!r}"
        return None
    return check


def idx_images(count, rows, cols, data):
    return gzip.compress(struct.pack(">IIII", 0x803, count, rows, cols) + data)


FMNIST_FILES = {"train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
                "t10k_images": "t10k-images-idx3-ubyte.gz", "t10k_labels": "t10k-labels-idx1-ubyte.gz"}


def fmnist_src(folder="src", **replaced):
    """A setup: {tmp}/<folder> with links to Fashion-MNIST's four files but
    those replaced (train_images=bytes or a function giving them, ...)."""
    def setup(t):
        (t.path / folder).mkdir()
        for key, name in FMNIST_FILES.items():
            content = replaced.get(key)
            if content is None:
                os.symlink(FMNIST_SRC / name, t.path / folder / name)
            else:
                t.write(f"{folder}/{name}", content() if callable(content) else content)
    return setup


def first_bytes(name, n):
    return lambda: (FMNIST_SRC / name).read_bytes()[:n]


def empty_file(rel):
    """A setup: an empty file {tmp}/rel."""
    def setup(t):
        t.write(rel, "")
    return setup


def wrote_tree(t, proc):
    n = len(list((t.path / "out/train").glob("*/*.JPEG")))
    return None if n == 100 else f"{n} training JPEGs written, want 100"


CASES = [
    # A flat val/ and LOC_val_solution.csv match one to one.
    Case("imagenet_val_csv_repeated_id", CONVERT,
         "error: {tmp}/raw/LOC_val_solution.csv: line 4: ImageId 'v1' again (first on line 2)", 2,
         "an ImageId on two rows (once accepted, one label silently lost)",
         setup=tree({"LOC_val_solution.csv": CSV + "v1,n02 0 0 7 7\n"})),
    Case("imagenet_val_csv_row_without_image", CONVERT,
         "error: {tmp}/raw/LOC_val_solution.csv: line 4: ImageId 'v3' has no image in {tmp}/raw/val", 2,
         "a row naming an image val/ lacks (once silently ignored: a val set short of images)",
         setup=tree({"LOC_val_solution.csv": CSV + "v3,n02 0 0 7 7\n"})),
    Case("imagenet_val_image_without_row", CONVERT,
         "error: {tmp}/raw/val/v9.JPEG: a val image with no row in {tmp}/raw/LOC_val_solution.csv", 2,
         "an image in val/ that no row labels (the message once named the bare file name)",
         setup=tree({"val/v9.JPEG": image()})),
    Case("imagenet_val_two_images_one_id", CONVERT,
         "error: {tmp}/raw/val/v1.png: a second image of ImageId 'v1' (line 2 of "
         "{tmp}/raw/LOC_val_solution.csv), after v1.JPEG", 2,
         "v1.JPEG and v1.png share an ImageId (once both converted with one label)",
         setup=tree({"val/v1.png": image("PNG")})),
    Case("imagenet_val_csv_empty_id", CONVERT,
         "error: {tmp}/raw/LOC_val_solution.csv: line 4: want ImageId,PredictionString, "
         "got ',n01 0 0 7 7'", 2, "a row with no ImageId",
         setup=tree({"LOC_val_solution.csv": CSV + ",n01 0 0 7 7\n"})),
    Case("imagenet_val_csv_unknown_wnid", CONVERT,
         "error: {tmp}/raw/LOC_val_solution.csv: line 4: wnid 'n99' of v3 is not one of train/'s classes", 2,
         "a CSV label that is not a train class", setup=tree({"LOC_val_solution.csv": CSV + "v3,n99 0 0 7 7\n"})),
    Case("imagenet_val_csv_missing", CONVERT,
         "error: {tmp}/raw/LOC_val_solution.csv: cannot open the val labels: No such file or directory", 2,
         "a flat val/ without its CSV", setup=tree({"LOC_val_solution.csv": None})),
    Case("imagenet_val_empty", CONVERT,
         "error: {tmp}/raw/val: holds no images (--splits=train converts train alone)", 2,
         "an empty val/ (once an empty val LMDB)", setup=tree(NO_FLAT_VAL, {"val": DIR})),
    Case("imagenet_val_csv_for_class_folders", CONVERT + " --val_csv={tmp}/raw/LOC_val_solution.csv",
         "error: --val_csv: given, but {tmp}/raw/val is in class folders, which need no CSV", 2,
         "--val_csv for a per-class val/ (once silently unread)",
         setup=tree(NO_FLAT_VAL, {"val/n01/x.JPEG": image()})),
    Case("imagenet_val_csv_without_val", CONVERT + " --splits=train --val_csv={tmp}/raw/LOC_val_solution.csv",
         "error: --val_csv: given, but --splits=train converts no val", 2,
         "--val_csv with no val split to label (once silently unread)", setup=tree()),
    # A UTF-8 byte-order mark is skipped.
    Case("imagenet_val_csv_byte_order_mark", CONVERT, None, 0,
         "a CSV saved with a UTF-8 byte-order mark and CRLF line ends (once: wnid 'PredictionString' "
         "of <BOM>ImageId is not one of train/'s classes)",
         setup=tree({"LOC_val_solution.csv": b"\xef\xbb\xbf" + CSV.replace("\n", "\r\n").encode()}),
         check=converted(2)),
    # An empty class folder is a broken copy.
    Case("imagenet_train_empty_class", CONVERT,
         "error: {tmp}/raw/train/n03: an empty class folder: a class without images (a broken copy?)", 2,
         "a class folder with no images (once accepted: a class the model never sees)",
         setup=tree({"train/n03": DIR})),
    Case("imagenet_val_empty_class", CONVERT,
         "error: {tmp}/raw/val/n02: an empty class folder: a class without images (a broken copy?)", 2,
         "a per-class val/ with an empty class folder",
         setup=tree(NO_FLAT_VAL, {"val/n01/x.JPEG": image(), "val/n02": DIR})),
    # --splits is a list of train and val, each once.
    Case("imagenet_splits_substring", CONVERT + " --splits=trainval_extra",
         f"error: --splits: 'trainval_extra' is not a split: {WANT_SPLITS}", 2,
         "a split name holding train and val (once accepted as both)", setup=tree()),
    Case("imagenet_splits_twice", CONVERT + " --splits=train,train",
         f"error: --splits: 'train,train' names train twice: {WANT_SPLITS}", 2, "a split named twice",
         setup=tree()),
    Case("imagenet_splits_empty_item", CONVERT + " --splits=val,",
         f"error: --splits: '' in 'val,' is not a split: {WANT_SPLITS}", 2, "a trailing comma", setup=tree()),
    Case("imagenet_splits_unknown_item", CONVERT + " --splits=train,test",
         f"error: --splits: 'test' in 'train,test' is not a split: {WANT_SPLITS}", 2,
         "a split ImageNet's layout has no folder for", setup=tree()),
    Case("imagenet_splits_empty", CONVERT + " --splits=", "error: --splits: no value given", 2,
         "an empty --splits", setup=tree()),
    Case("imagenet_splits_any_order", CONVERT + " --splits=val,train", None, 0, "both splits, val first",
         setup=tree(), check=converted(2)),
    # The root and --out.
    Case("imagenet_no_root", "{build}/bin/imagenet_to_lmdb --out={tmp}/lmdb",
         "error: --root: missing: the ImageNet root (with train/ and val/)", 2, "no --root"),
    Case("imagenet_root_missing", "{build}/bin/imagenet_to_lmdb --root={tmp}/none --out={tmp}/lmdb",
         "error: --root: '{tmp}/none': No such file or directory", 2, "--root names nothing"),
    Case("imagenet_root_is_a_file", "{build}/bin/imagenet_to_lmdb --root={tmp}/raw/LOC_val_solution.csv "
         "--out={tmp}/lmdb", "error: --root: '{tmp}/raw/LOC_val_solution.csv' is not a folder", 2,
         "--root names a file", setup=tree()),
    Case("imagenet_root_without_train", CONVERT,
         "error: {tmp}/raw/train: cannot open the folder: No such file or directory", 2,
         "a root with val/ alone", setup=tree({"train/n01/a.JPEG": None, "train/n02/b.JPEG": None})),
    Case("imagenet_root_without_val", CONVERT,
         "error: {tmp}/raw/val: cannot open the folder: No such file or directory", 2,
         "a root with train/ alone, both splits asked for", setup=tree(NO_FLAT_VAL)),
    Case("imagenet_out_is_a_file", "{build}/bin/imagenet_to_lmdb --root={tmp}/raw "
         "--out={tmp}/raw/LOC_val_solution.csv",
         "error: --out: '{tmp}/raw/LOC_val_solution.csv' is not a folder", 2,
         "--out names a file (once 'cannot create directory' on its train/)", setup=tree()),
    Case("imagenet_out_holds_val", CONVERT,
         "error: {tmp}/lmdb/val: already exists; remove it first (or leave val out of --splits)", 2,
         "val of an earlier run in --out (once met only after train was converted)",
         setup=then(tree(), lambda t: t.run(CONVERT + " --splits=val")),
         check=absent("lmdb/train", "train was converted before the refusal")),
    # Files of a class folder, and class names.
    Case("imagenet_train_non_image", CONVERT,
         "error: {tmp}/raw/train/n01/readme.txt: not a JPEG or PNG image (6 bytes starting 68 65 6c 6c)", 2,
         "a text file in a class folder; no classes.txt is left", setup=tree({"train/n01/readme.txt": "hello\n"}),
         check=absent("lmdb/classes.txt", "a failed run left it")),
    Case("imagenet_train_truncated_jpeg", CONVERT,
         "error: {tmp}/raw/train/n02/cut.JPEG: JPEG decode: Premature end of JPEG file (corrupt or "
         "truncated; --accept_warnings keeps such files)", 2,
         "a JPEG cut short; no classes.txt is left (once written before the conversion)",
         setup=tree({"train/n02/cut.JPEG": cut_jpeg}),
         check=absent("lmdb/classes.txt", "a failed run left it")),
    Case("imagenet_train_dangling_link", CONVERT,
         "error: {tmp}/raw/train/n01/gone.JPEG: cannot read: No such file or directory", 2,
         "a link to nothing in a class folder (an unreadable file where tests run as root)",
         setup=then(tree(), lambda t: os.symlink("/nonexistent/x.JPEG", t.path / "raw/train/n01/gone.JPEG"))),
    Case("imagenet_train_named_pipe", CONVERT,
         "error: {tmp}/raw/train/n01/pipe.JPEG: neither a file nor a folder", 2,
         "a named pipe in a class folder (once a hang, waiting for a writer)",
         setup=then(tree(), lambda t: os.mkfifo(t.path / "raw/train/n01/pipe.JPEG")), timeout_s=30),
    Case("imagenet_train_nested_folder", CONVERT,
         "error: {tmp}/raw/train/n01: holds a folder 'extra'; a class folder holds only images", 2,
         "a folder inside a class folder", setup=tree({"train/n01/extra/x.JPEG": image()})),
    Case("imagenet_train_stray_image", CONVERT,
         "error: {tmp}/raw/train/x.JPEG: an image in no class folder (images belong in train/<wnid>/)", 2,
         "an image directly in train/", setup=tree({"train/x.JPEG": image()})),
    Case("imagenet_train_hidden_folder", CONVERT,
         "error: {tmp}/raw/train/.cache: a hidden folder among the class folders (every folder of train/ is "
         "a class)", 2, "a hidden folder in train/ (once class 0, shifting every label by one)",
         setup=tree({"train/.cache/x.JPEG": image()})),
    Case("imagenet_train_class_with_space", CONVERT,
         "error: {tmp}/raw/train/n0 3: a class name with a space or control character (classes.txt and the "
         "val CSV separate names by spaces)", 2,
         "a class folder name with a space (once a line of classes.txt with three fields)",
         setup=tree({"train/n0 3/x.JPEG": image()})),
    Case("imagenet_val_unknown_class_folder", CONVERT,
         "error: {tmp}/raw/val/n07: class folder 'n07' is not one of train/'s classes", 2,
         "a per-class val/ folder that is not a train class",
         setup=tree(NO_FLAT_VAL, {"val/n07/x.JPEG": image()})),
    Case("imagenet_val_mixed_layout", CONVERT,
         "error: {tmp}/raw/val: mixes class folders ('n01') and images ('v1.JPEG'); use one layout", 2,
         "val/ with both class folders and images", setup=tree({"val/n01/x.JPEG": image()})),
    # fmnist_to_imagenet: flags.
    Case("fmnist_side_too_small", FMNIST + " --side=4", "error: --side: 4 is outside [8, 1024]", 2,
         "a side below 8 (once checked twice, the declared range [1, 1024] disagreeing)"),
    Case("fmnist_train_count_misses_a_class", FMNIST + " --train_count=5 --val_count=5",
         "error: --train_count: the first 5 training images hold no Trouser (label 1); every class needs one", 2,
         "too few images for every class (once an empty class folder)",
         check=absent("out", "a refused run wrote --out")),
    Case("fmnist_train_count_over_file", FMNIST + " --src={tmp}/src --train_count=200",
         "error: --train_count: 200 asked for, {tmp}/src/train-images-idx3-ubyte.gz holds 150", 2,
         "more images asked for than the file holds (the message once named 'train', not the flag)",
         setup=fmnist_src(train_images=idx_images(150, 28, 28, bytes(150 * 784)))),
    Case("fmnist_out_holds_val", FMNIST, "error: {tmp}/out/val: already exists; remove it first", 2,
         "val/ of an earlier run in --out (once mixed with this run's images)",
         setup=lambda t: (t.path / "out/val").mkdir(parents=True)),
    Case("fmnist_out_is_a_file", "{build}/bin/fmnist_to_imagenet --out={tmp}/f",
         "error: --out: '{tmp}/f' is not a folder", 2, "--out names a file", setup=empty_file("f")),
    # fmnist_to_imagenet: source files.
    Case("fmnist_src_missing", FMNIST + " --src={tmp}/none",
         "error: {tmp}/none/train-images-idx3-ubyte.gz: cannot open: No such file or directory", 2,
         "--src names nothing; nothing is written", check=absent("out", "a refused run wrote --out")),
    Case("fmnist_src_with_quote", "{build}/bin/fmnist_to_imagenet --src=\"{tmp}/it's\" --out={tmp}/out "
         "--train_count=100 --val_count=10", None, 0,
         "a source folder named with a quote (once 'sh: Syntax error: Unterminated quoted string')",
         setup=fmnist_src("it's"), check=wrote_tree),
    Case("fmnist_src_cut_short", FMNIST + " --src={tmp}/src --train_count=1000",
         "error: {tmp}/src/train-images-idx3-ubyte.gz: truncated: 5183 of the 784000 bytes of its first "
         "1000 items", 2, "the first 3,000 bytes of the gzip'ed images (an interrupted download)",
         setup=fmnist_src(train_images=first_bytes("train-images-idx3-ubyte.gz", 3000))),
    Case("fmnist_src_not_deflate", FMNIST + " --src={tmp}/src",
         "error: {tmp}/src/train-images-idx3-ubyte.gz: cannot read: invalid block type", 2,
         "a gzip header over data that is not deflate",
         setup=fmnist_src(train_images=b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03" + b"\xff" * 64)),
    Case("fmnist_src_zero_rows", FMNIST + " --src={tmp}/src --train_count=5",
         "error: {tmp}/src/train-images-idx3-ubyte.gz: images of 0x28 pixels: want 1..1024 a side", 2,
         "an IDX header of 0-row images (once read past an empty buffer into JPEGs of garbage)",
         setup=fmnist_src(train_images=idx_images(10, 0, 28, b""))),
    Case("fmnist_src_huge_count", FMNIST + " --src={tmp}/src --train_count=5",
         "error: {tmp}/src/train-images-idx3-ubyte.gz: truncated: 100 of the 3920 bytes of its first 5 items", 2,
         "a header claiming 4e9 images over 100 bytes (once 'malloc failed (3136000000000 bytes)', status 1)",
         setup=fmnist_src(train_images=idx_images(4000000000, 28, 28, bytes(100)))),
    Case("fmnist_src_bad_magic", FMNIST + " --src={tmp}/src",
         "error: {tmp}/src/train-labels-idx1-ubyte.gz: not an IDX file of 1-dimensional unsigned bytes "
         "(magic 00000803)", 2, "an image file where the labels belong",
         setup=fmnist_src(train_labels=idx_images(1, 28, 28, bytes(784)))),
]
