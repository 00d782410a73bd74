#!/usr/bin/env bash
# ResNet end to end on CPU, the path `make run` takes: Fashion-MNIST through
# the ImageNet layout and converter (image_classification/prepare_data.sh),
# training to image_classification/configs/small.conf's target, the official
# compliance checker on the log (resnet rules with only the target changed),
# bad flags, and a 2-rank data-parallel run under mpirun.
# Usage: tests/image_classification/test_resnet_e2e.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
conf=image_classification/configs/small.conf
target=$(config_target $conf)
export PROGRESS_INTERVAL_S=1000

if [[ ! -x $build/bin/resnet ]]; then
  echo "FAIL resnet_e2e: $build/bin/resnet is not built"
  exit 1
fi

# 1. The data set, through the real converter; and a tenth of it for the
# runs below that check the mechanics of one or two epochs (LARS, gradient
# accumulation, resume, two ranks), not the target.
if bash image_classification/prepare_data.sh small "$tmp/data" "$build" >"$tmp/prep.out" 2>&1 &&
  [[ -d $tmp/data/lmdb/train && -d $tmp/data/lmdb/val ]] &&
  TRAIN_COUNT=6000 VAL_COUNT=2000 bash datasets/prepare_fmnist_classification.sh small "$tmp/mini" \
    "$build" >>"$tmp/prep.out" 2>&1; then
  echo "PASS resnet_prepare_small"
else
  echo "FAIL resnet_prepare_small: $(tail -n 1 "$tmp/prep.out")"
  exit 1
fi

# 2. Train to the target; the log complies.
log=$tmp/run.log
"$build/bin/resnet" --config=$conf --data_dir="$tmp/data" --device=cpu --log_file="$log" \
  >"$tmp/train.out" 2>&1
small_run_checks resnet "$target" "$log" $?

# LARS (the full configs' optimizer): one epoch; its log passes the lars rules.
"$build/bin/resnet" --config=$conf --data_dir="$tmp/mini" --device=cpu --log_file="$tmp/lars.log" \
  --optimizer=lars --base_lr=2.0 --max_epochs=1 --target_accuracy=0.5 >"$tmp/lars.out" 2>&1
if grep -q 'resnet: target reached' "$tmp/lars.out" &&
  grep -q '"opt_name", "value": "lars"' "$tmp/lars.log" &&
  python3 logs/result.py --target 0.5 --require-success "$tmp/lars.log" >"$tmp/lars_check.out" 2>&1; then
  echo "PASS resnet_lars_log_complies ($(grep '^resnet: epoch' "$tmp/lars.out" | cut -d, -f1))"
else
  echo "FAIL resnet_lars_log_complies: $(grep -E '^error|^resnet: epoch' "$tmp/lars.out" | tr '\n' ' ') $(tail -c 300 "$tmp/lars_check.out")"
fi

# Resume: 1 epoch, then --resume for the second, gives the same final
# checkpoint, bit for bit, as 2 epochs uninterrupted.
resume_check resnet_resume_matches_uninterrupted "$tmp" "$build/bin/resnet" --config=$conf \
  --data_dir="$tmp/mini" --device=cpu --target_accuracy=0.99

# 3. Bad input: one line naming the flag or the directory.
trainer=$build/bin/resnet
expect_error resnet_no_data_dir "error: --data_dir: no data set given" --config=$conf
expect_error resnet_missing_lmdb "$tmp/nowhere/lmdb/train" --config=$conf --data_dir="$tmp/nowhere"
expect_error resnet_bad_stages "error: --stages: '3,x' is not 1 to 4 comma-separated block counts" --config=$conf --data_dir="$tmp/data" --stages=3,x
expect_error resnet_bad_optimizer "error: --optimizer: 'adam' is not one of lars|sgd" --config=$conf \
  --data_dir="$tmp/data" --optimizer=adam
expect_error resnet_unknown_key "error: --depth: unknown key" --config=$conf --data_dir="$tmp/data" --depth=50
expect_error resnet_resume_without_checkpoint "error: --resume: needs --checkpoint=PATH" --config=$conf \
  --data_dir="$tmp/data" --resume
expect_error resnet_uneven_accumulation "error: --grad_accumulation: 3 does not split the 128 images per rank evenly" \
  --config=$conf --data_dir="$tmp/data" --grad_accumulation=3
expect_error resnet_lowp_on_cpu "error: --precision: 'bf16' needs a GPU" --config=$conf \
  --data_dir="$tmp/data" --precision=bf16
printf 'not a checkpoint\n' >"$tmp/junk.ckpt"
expect_error resnet_resume_from_junk "junk.ckpt: not a checkpoint of this suite" --config=$conf \
  --data_dir="$tmp/data" --resume --checkpoint="$tmp/junk.ckpt"

# mini_epoch NAME TARGET [PATTERN...] -- [LAUNCHER...] -- [FLAGS...]: one
# epoch of the tenth through LAUNCHER (mpirun, or nothing) with FLAGS; it
# exits 0 having reached TARGET, its output or log holds every PATTERN, and
# the log passes the checker: "PASS NAME (epoch line)", else "FAIL NAME".
mini_epoch() {
  local name=$1 target=$2 patterns=() launch=() ok=1
  shift 2
  while [[ $1 != -- ]]; do patterns+=("$1"); shift; done
  shift
  while [[ $1 != -- ]]; do launch+=("$1"); shift; done
  shift
  timeout 600 "${launch[@]}" "$build/bin/resnet" --config=$conf --data_dir="$tmp/mini" --device=cpu \
    --log_file="$tmp/$name.log" --max_epochs=1 --target_accuracy="$target" "$@" >"$tmp/$name.out" 2>&1
  local rc=$?
  grep -q 'resnet: target reached' "$tmp/$name.out" || ok=0
  for p in "${patterns[@]}"; do grep -q -- "$p" "$tmp/$name.out" "$tmp/$name.log" || ok=0; done
  python3 logs/result.py --target "$target" --require-success "$tmp/$name.log" >/dev/null 2>&1 || ok=0
  if [[ $rc == 0 && $ok == 1 ]]; then
    echo "PASS $name ($(grep '^resnet: epoch' "$tmp/$name.out" | cut -d, -f1))"
  else
    echo "FAIL $name: exit $rc; $(grep -E '^(error|internal error)|^resnet: epoch|steps per epoch' "$tmp/$name.out" | head -n 3 | tr '\n' ' ')"
  fi
}

# Gradient accumulation: 2 micro-batches of 64 a step (BN span 64, as the
# 2-rank run below), one epoch; the log says so and complies.
mini_epoch resnet_grad_accumulation 0.5 '"gradient_accumulation_steps", "value": 2' \
  '"model_bn_span", "value": 64' -- -- --grad_accumulation=2

# The full configs' recipe keys on the small model, one epoch of the tenth
# (6,000 images, batch 128): the reference's distorted-box crop and mean
# subtraction, its truncated fan-in init without zero gammas, and the last
# short batch kept: 47 steps, the 47th of 112 images; on two ranks where
# mpirun is (56 images each in that step: no rank waits in an all-reduce
# the other never joins). It learns (top-1 0.2 against 0.1 for chance).
launch=()
if command -v mpirun >/dev/null && ldd "$build/bin/resnet" | grep -q libmpi; then
  launch=(mpirun --allow-run-as-root --oversubscribe -np 2)
fi
mini_epoch resnet_reference_recipe_keys 0.2 ', 47 steps per epoch' '"train_samples", "value": 6000' -- \
  "${launch[@]}" -- --loader_threads=1 --crop=distorted_box --crop_scale_min=0.05 --crop_ratio_max=1.33 \
  --crop_attempts=100 --crop_min_covered=0.1 --normalize=mean --conv_init_scale=1 --conv_init_fan=in \
  --conv_init_dist=truncated_normal --zero_init_residual=false --train_last_batch=keep

# The op profile after a synthetic run: the small net's 15 convolutions a
# step, and a training-step row taking the whole step.
"$build/bin/resnet" --config=$conf --device=cpu --synthetic --synthetic_steps=1 --profile_steps=2 \
  --log_file="$tmp/prof.log" >"$tmp/prof.out" 2>&1
if grep -q '^profile: 2 steps' "$tmp/prof.out" &&
  grep -Eq '^  op_conv2d_fwd +15\.0 ' "$tmp/prof.out" &&
  grep -Eq '^  training step +1\.0 +[0-9.]+ +100\.0%' "$tmp/prof.out"; then
  echo "PASS resnet_profile_table"
else
  echo "FAIL resnet_profile_table: $(grep -A4 '^profile' "$tmp/prof.out" | tr '\n' '|')"
fi

# 4. Two ranks: each a half batch and half of every eval; one epoch.
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
if ! command -v mpirun >/dev/null; then
  echo "SKIP resnet_two_ranks: no mpirun"
elif ! ldd "$build/bin/resnet" | grep libmpi >/dev/null; then
  echo "SKIP resnet_two_ranks: $build/bin/resnet was built without MPI (MPI=0)"
else
  mini_epoch resnet_two_ranks 0.5 '"model_bn_span", "value": 64' -- "${mpi[@]}" -- --loader_threads=1
fi

# 5. The GPU: the small run to its target in each precision (fp32 on CUDA
# against the CPU's pace; bf16 and fp16 the mixed-precision path end to end,
# fp16 with dynamic loss scaling).
cuda_reaches_target resnet "$build/bin/resnet" "$target" --config=$conf --data_dir="$tmp/data"
