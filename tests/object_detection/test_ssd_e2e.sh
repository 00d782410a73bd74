#!/usr/bin/env bash
# SSD end to end on CPU, the path `make run BENCH=ssd` takes: the generated
# COCO-layout set through the real converter (object_detection/prepare_data.sh),
# training to object_detection/configs/small.conf's target, the official
# compliance checker on the log (closed_ssd rules with only the target
# changed), the detections file scored by pycocotools against the logged mAP,
# resume, bad flags, the op profile, and a 2-rank run under mpirun.
# Usage: tests/object_detection/test_ssd_e2e.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
conf=object_detection/configs/small.conf
target=$(config_target $conf)
export PROGRESS_INTERVAL_S=1000
trainer=$build/bin/ssd

if [[ ! -x $trainer ]]; then
  echo "FAIL ssd_e2e: $trainer is not built"
  exit 1
fi

# 1. The data set, through the generator and the converter; and a small
# slice of it for the runs below that check mechanics, not the target.
if bash object_detection/prepare_data.sh small "$tmp/data" "$build" >"$tmp/prep.out" 2>&1 &&
  TRAIN_COUNT=256 VAL_COUNT=64 bash object_detection/prepare_data.sh small "$tmp/mini" "$build" \
    >>"$tmp/prep.out" 2>&1; then
  echo "PASS ssd_prepare_small"
else
  echo "FAIL ssd_prepare_small: $(tail -n 1 "$tmp/prep.out")"
  exit 1
fi

# 2. Train to the target; the log complies; the detections of the last eval,
# scored by pycocotools, give the mAP the log holds.
log=$tmp/run.log
"$trainer" --config=$conf --data_dir="$tmp/data" --device=cpu --log_file="$log" \
  --detections_out="$tmp/dets.json" >"$tmp/train.out" 2>&1
small_run_checks ssd "$target" "$log" $?
# pycocotools on the written file (C and Python agree to about 1e-15 on the
# same detections: test_coco_eval_pycocotools.py); the JSON's numbers read
# back as the same doubles, so anything past 1e-9 is a wrong file.
logged=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$log" | tail -n 1 | sed 's/.*: //')
scored=$(python3 - "$tmp/data/raw/annotations/instances_val2017.json" "$tmp/dets.json" 2>"$tmp/coco.err" <<'EOF'
import contextlib, io, sys
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval
with contextlib.redirect_stdout(io.StringIO()):
    gt = COCO(sys.argv[1])
    ev = COCOeval(gt, gt.loadRes(sys.argv[2]), "bbox")
    ev.evaluate(); ev.accumulate(); ev.summarize()
print(repr(float(ev.stats[0])))
EOF
)
if close "$logged" "$scored" 1e-9; then
  echo "PASS ssd_detections_out_scores_as_logged (mAP $scored)"
else
  echo "FAIL ssd_detections_out_scores_as_logged: logged '$logged', pycocotools '$scored' $(tail -n 1 "$tmp/coco.err")"
fi

# 3. Resume: 1 epoch, then --resume for the second, gives the same final
# checkpoint, bit for bit, as 2 epochs uninterrupted.
resume_check ssd_resume_matches_uninterrupted "$tmp" "$trainer" --config=$conf \
  --data_dir="$tmp/mini" --device=cpu --target_accuracy=0.99

# 4. Bad input: one line naming the flag or the file.
expect_error ssd_no_data_dir "error: --data_dir: no data set given" --config=$conf
expect_error ssd_missing_lmdb "$tmp/nowhere/lmdb/train" --config=$conf --data_dir="$tmp/nowhere"
expect_error ssd_bad_extra_block "error: --extra_blocks: block 2 '32:64:2' is not mid:out:stride:padding" \
  --config=$conf --data_dir="$tmp/mini" --extra_blocks=64:128:2:1,32:64:2
expect_error ssd_steps_per_map "error: --box_steps: 4 steps for 5 feature maps" --config=$conf \
  --data_dir="$tmp/mini" --box_steps=8,16,32,64
expect_error ssd_fractional_step "error: --box_steps: item 2 (16.5) is not a whole number >= 1" --config=$conf \
  --data_dir="$tmp/mini" --box_steps=8,16.5,32,64,128
expect_error ssd_ratios_per_map "error: --box_ratios: '2;2' does not give one ratio list" --config=$conf \
  --data_dir="$tmp/mini" --box_ratios='2;2'
expect_error ssd_empty_map "error: --extra_blocks: feature map 6 (after extra block 5) is empty for a 128-pixel input" --config=$conf --data_dir="$tmp/mini" \
  --extra_blocks=64:128:2:1,32:64:2:1,32:64:2:1,32:64:2:1,32:64:1:0
expect_error ssd_missing_val_annotations "error: --val_annotations: $tmp/x.json does not exist" \
  --config=$conf --data_dir="$tmp/mini" --val_annotations="$tmp/x.json"
expect_error ssd_max_samples "error: --max_samples: " --config=$conf --data_dir="$tmp/mini" --max_samples=51
expect_error ssd_lowp_on_cpu "error: --precision: 'bf16' needs a GPU" --config=$conf \
  --data_dir="$tmp/mini" --precision=bf16
printf '{"categories": []}' >"$tmp/mini_bad_categories.json"
cp -r "$tmp/mini" "$tmp/badcat"
cp "$tmp/mini_bad_categories.json" "$tmp/badcat/lmdb/categories.json"
expect_error ssd_bad_categories "$tmp/badcat/lmdb/categories.json: not a categories file" --config=$conf \
  --data_dir="$tmp/badcat"
printf 'not a checkpoint\n' >"$tmp/junk.ckpt"
expect_error ssd_backbone_junk "junk.ckpt: not a checkpoint of this suite" --config=$conf \
  --data_dir="$tmp/mini" --backbone="$tmp/junk.ckpt"

# The backbone from a checkpoint of the suite's own classification trainer
# (a ResNet of the small SSD's backbone, one epoch on Fashion-MNIST): its
# tensors and BN statistics load by name, its classifier is left out; one of
# another architecture is refused naming the tensor. (That the values land
# where they belong: tests/models/test_resnet_import.c.)
resnet_flags=(--block=basic --stages=1,1,1 --width=16 --imagenet_stem=true --num_classes=10
  --image_size=32 --resize_side=32 --batch_size=64 --optimizer=sgd --base_lr=0.1 --max_epochs=1
  --target_accuracy=0.99 --device=cpu --loader_threads=2)
if TRAIN_COUNT=512 VAL_COUNT=128 bash datasets/prepare_fmnist_classification.sh small "$tmp/fm" "$build" \
  >"$tmp/fm.out" 2>&1 &&
  "$build/bin/resnet" --config=image_classification/configs/small.conf --data_dir="$tmp/fm" \
    "${resnet_flags[@]}" --checkpoint="$tmp/resnet.ckpt" --log_file="$tmp/resnet.log" >"$tmp/resnet.out" 2>&1 &&
  "$trainer" --config=$conf --data_dir="$tmp/mini" --device=cpu --backbone="$tmp/resnet.ckpt" \
    --max_epochs=1 --target_accuracy=0.99 --log_file="$tmp/bb.log" >"$tmp/bb.out" 2>&1 &&
  grep -q "^ssd: backbone from $tmp/resnet.ckpt: 27 tensors, 18 buffers" "$tmp/bb.out" &&
  grep -q '^ssd: epoch 1:' "$tmp/bb.out"; then
  echo "PASS ssd_backbone_from_classifier_checkpoint"
else
  echo "FAIL ssd_backbone_from_classifier_checkpoint: $(grep -hE '^error|^ssd: (backbone|epoch)' "$tmp/fm.out" "$tmp/resnet.out" "$tmp/bb.out" 2>/dev/null | head -n 3 | tr '\n' ' ')"
fi
expect_error ssd_backbone_of_another_width "resnet.ckpt: tensor 'stem.conv.weight' has" --config=$conf \
  --data_dir="$tmp/mini" --backbone="$tmp/resnet.ckpt" --width=8

# 5. The op profile after a synthetic run: the small net's convolutions a
# step (stem, 2 per basic block and a downsample in two stages: 9; 2 per
# extra block: 8; 2 heads per map: 10), and a training-step row taking the
# whole step.
"$trainer" --config=$conf --device=cpu --synthetic --synthetic_steps=1 --profile_steps=1 \
  --log_file="$tmp/prof.log" >"$tmp/prof.out" 2>&1
if grep -q '^profile: 1 steps' "$tmp/prof.out" &&
  grep -Eq '^  op_conv2d_fwd +27\.0 ' "$tmp/prof.out" &&
  grep -Eq '^  training step +1\.0 +[0-9.]+ +100\.0%' "$tmp/prof.out"; then
  echo "PASS ssd_profile_table"
else
  echo "FAIL ssd_profile_table: $(grep -A4 '^profile' "$tmp/prof.out" | tr '\n' '|') $(grep -m1 error "$tmp/prof.out")"
fi

# 6. Two ranks: each a half batch, half of the eval's images; the matches of
# both gathered for one mAP, logged once; the log complies.
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
if ! command -v mpirun >/dev/null; then
  echo "SKIP ssd_two_ranks: no mpirun"
elif ! ldd "$trainer" | grep libmpi >/dev/null; then
  echo "SKIP ssd_two_ranks: $trainer was built without MPI (MPI=0)"
else
  timeout 600 "${mpi[@]}" "$trainer" --config=$conf --data_dir="$tmp/mini" --device=cpu \
    --log_file="$tmp/two.log" --max_epochs=1 --loader_threads=1 >"$tmp/two.out" 2>&1
  rc=$?
  got=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$tmp/two.log" | sed 's/.*: //')
  if [[ $rc == 0 && -n $got ]] && grep -q '"model_bn_span", "value": 8' "$tmp/two.log" &&
    python3 logs/result.py --target "$got" "$tmp/two.log" >/dev/null 2>&1; then
    echo "PASS ssd_two_ranks ($(grep '^ssd: epoch' "$tmp/two.out" | cut -d, -f1))"
  else
    echo "FAIL ssd_two_ranks: exit $rc; $(grep -E '^error|^ssd: epoch|time to train' "$tmp/two.out" | head -n 3 | tr '\n' ' ')"
  fi
fi

# 7. The GPU: the small run to its target in each precision.
cuda_reaches_target ssd "$trainer" "$target" --config=$conf --data_dir="$tmp/data"
