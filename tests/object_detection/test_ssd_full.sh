#!/usr/bin/env bash
# The full configs' recipe on a COCO-layout set of a few images: what
# `prepare_data.sh full` and the full configs add to the small path.
#   - prepare_data.sh full refuses, in one line naming the file, to go on
#     without torchvision's ResNet-34 weights, and writes nothing; with them
#     (a fake ResNet-34 state dict of tests/golden/resnet34_weights.py, under
#     torchvision's file name) it converts them into DATA_DIR/resnet34.ckpt
#     and keeps only the val images with annotations (the reference's eval
#     set);
#   - the trainer under full_1gpu.conf refuses to start without that file
#     (exit 2, before run_start), and with it loads the backbone from the
#     path relative to --data_dir and logs eval_samples = the annotated val
#     images;
#   - eval_epochs: the evals come at exactly the epochs listed;
#   - the eval refuses an annotations file with an annotated image the val
#     LMDB lacks (its misses would leave the mAP).
# Usage: tests/object_detection/test_ssd_full.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
export PROGRESS_INTERVAL_S=1000
trainer=$build/bin/ssd
full=object_detection/configs/full_1gpu.conf
small=object_detection/configs/small.conf

if [[ ! -x $trainer ]]; then
  echo "FAIL ssd_full: $trainer is not built"
  exit 1
fi
# 2 train and 4 val images; the generator leaves every 20th image (index 3)
# without objects, so 3 val images have annotations.
if ! "$build/bin/coco_generate" --out="$tmp/coco" --train_count=2 --val_count=4 --side=64 >"$tmp/gen.out" 2>&1; then
  echo "FAIL ssd_full: coco_generate: $(tail -n 1 "$tmp/gen.out")"
  exit 1
fi
annotated=$(python3 -c "
import json, sys
d = json.load(open(sys.argv[1]))
print(len({a['image_id'] for a in d['annotations']}))" "$tmp/coco/annotations/instances_val2017.json")

# The first line of stderr, and that there is no other.
one_line() { [[ $(wc -l <"$1") == 1 ]] && head -n 1 "$1"; }

# 1. No weights: one line naming the file, status 2, nothing written.
data=$tmp/data
mkdir -p "$tmp/home"
prepare() { HOME=$tmp/home TORCH_HOME= COCO_DIR=$tmp/coco bash object_detection/prepare_data.sh full "$@" "$build"; }
prepare "$data" >"$tmp/prep.out" 2>"$tmp/prep.err"
rc=$? line=$(one_line "$tmp/prep.err")
if [[ $rc == 2 && $line == "prepare_data: no resnet34-333f7ec4.pth in $data or $tmp/home/.cache/torch/hub/checkpoints:"* &&
  ! -e $data/lmdb && ! -e $data/resnet34.ckpt ]]; then
  echo "PASS ssd_full_prepare_refuses_without_weights"
else
  echo "FAIL ssd_full_prepare_refuses_without_weights: exit $rc, '$(head -c 300 "$tmp/prep.err")'"
fi
RESNET34_PTH=$tmp/none.pth prepare "$data" >"$tmp/prep.out" 2>"$tmp/prep.err"
rc=$? line=$(one_line "$tmp/prep.err")
if [[ $rc == 2 && $line == "prepare_data: RESNET34_PTH=$tmp/none.pth is not a file"* ]]; then
  echo "PASS ssd_full_prepare_names_a_missing_RESNET34_PTH"
else
  echo "FAIL ssd_full_prepare_names_a_missing_RESNET34_PTH: exit $rc, '$(head -c 300 "$tmp/prep.err")'"
fi

# 2. With the weights under torchvision's name in DATA_DIR.
mkdir -p "$data"
python3 tests/golden/resnet34_weights.py "$tmp/weights.npz" >/dev/null &&
  mv "$tmp/weights.npz" "$data/resnet34-333f7ec4.pth"
if prepare "$data" >"$tmp/prep.out" 2>&1 && [[ -f $data/resnet34.ckpt ]] &&
  grep -q "val: $annotated images, .* 1 images without annotations left out" "$tmp/prep.out"; then
  echo "PASS ssd_full_prepare_converts_weights_and_annotated_val"
else
  echo "FAIL ssd_full_prepare_converts_weights_and_annotated_val: $(grep -E 'error|val:|prepare_data' "$tmp/prep.out" | tr '\n' ' ')"
fi

# 3. The full config without the backbone file: refused before run_start.
mkdir -p "$tmp/nobb"
ln -s "$data/lmdb" "$tmp/nobb/lmdb"
ln -s "$tmp/coco" "$tmp/nobb/raw"
"$trainer" --config=$full --data_dir="$tmp/nobb" --device=cpu --precision=fp32 \
  --log_file="$tmp/nobb.log" >"$tmp/nobb.out" 2>&1
rc=$?
err=$(grep '^error' "$tmp/nobb.out")
if [[ $rc == 2 && $err == "error: --backbone: $tmp/nobb/resnet34.ckpt does not exist: the ImageNet ResNet-34"*"prepare_data.sh full"* ]] &&
  ! grep -q '"run_start"' "$tmp/nobb.log"; then
  echo "PASS ssd_full_config_refuses_without_backbone"
else
  echo "FAIL ssd_full_config_refuses_without_backbone: exit $rc, '$err'"
fi

# 4. The full config (SSD300, fp32 on the CPU) one step and one eval: the
# backbone from DATA_DIR/resnet34.ckpt, the annotated val images evaluated.
"$trainer" --config=$full --data_dir="$data" --device=cpu --precision=fp32 --batch_size=1 --max_epochs=1 \
  --eval_epochs=1 --loader_threads=1 --target_accuracy=0.99 --log_file="$tmp/full.log" >"$tmp/full.out" 2>&1
rc=$?
if [[ $rc == 0 ]] && grep -q "^ssd: backbone from $data/resnet34.ckpt: 87 tensors, 58 buffers" "$tmp/full.out" &&
  grep -q "\"key\": \"eval_samples\", \"value\": $annotated," "$tmp/full.log" &&
  grep -q '^ssd: epoch 1: mAP' "$tmp/full.out"; then
  echo "PASS ssd_full_config_loads_backbone_and_evaluates_annotated_images ($annotated of 4)"
else
  echo "FAIL ssd_full_config_loads_backbone_and_evaluates_annotated_images: exit $rc; $(grep -hE '^error|^ssd: (backbone|epoch)|eval_samples' "$tmp/full.out" | head -n 3 | tr '\n' ' ')"
fi

# 5. eval_epochs on the small model: evals after epochs 2 and 3 of 4 only.
"$trainer" --config=$small --data_dir="$data" --device=cpu --batch_size=2 --max_epochs=4 --eval_epochs=2,3 \
  --loader_threads=1 --target_accuracy=0.99 --log_file="$tmp/fixed.log" >"$tmp/fixed.out" 2>&1
rc=$?
evals=$(grep -o '"key": "eval_start".*"epoch_num": [0-9]*' "$tmp/fixed.log" | sed 's/.*: //' | tr '\n' ' ')
epochs=$(grep -c '"key": "epoch_start"' "$tmp/fixed.log")
if [[ $rc == 0 && $evals == "2 3 " && $epochs == 4 ]]; then
  echo "PASS ssd_eval_epochs_fix_the_evals"
else
  echo "FAIL ssd_eval_epochs_fix_the_evals: exit $rc, evals after epochs '$evals', $epochs epochs"
fi

# 6. An annotated image the val LMDB lacks (image 3 given a box here).
python3 - "$tmp/coco/annotations/instances_val2017.json" "$tmp/more.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
empty = sorted({im["id"] for im in d["images"]} - {a["image_id"] for a in d["annotations"]})
d["annotations"].append({"id": 999999, "image_id": empty[0], "category_id": d["categories"][0]["id"],
                         "bbox": [1, 1, 8, 8], "area": 64, "iscrowd": 0})
json.dump(d, open(sys.argv[2], "w"))
EOF
"$trainer" --config=$small --data_dir="$data" --device=cpu --batch_size=2 --max_epochs=1 --eval_every=1 \
  --loader_threads=1 --val_annotations="$tmp/more.json" --log_file="$tmp/more.log" >"$tmp/more.out" 2>&1
rc=$?
err=$(grep '^error' "$tmp/more.out")
want="error: --val_annotations: the eval scored $annotated images, $annotated of them with annotations, where the val LMDB holds $annotated and the annotations have $((annotated + 1)) images with annotations"
if [[ $rc == 2 && $err == "$want" ]]; then
  echo "PASS ssd_eval_refuses_an_annotated_image_it_lacks"
else
  echo "FAIL ssd_eval_refuses_an_annotated_image_it_lacks: exit $rc, '$err'"
fi
