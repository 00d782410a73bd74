#!/usr/bin/env bash
# The trainers' CUDA paths on the CPU emulation of CUDA (make test-emu only;
# tests/emu/README.md): loader to device, weight casts, cuDNN/cuBLAS calls,
# fused optimizers, loss scaling, GPU eval, GPU negative sampling, checkpoints,
# the SSD loss and decode, the Transformer's step and its cached decoding,
# BERT's fine-tuning step on SQuAD windows (squad_generate, squad_to_lmdb)
# and the span logits of its eval.
# Each run is set against the same binary on --device=cpu with the same
# seed and data, which takes the same batches:
# - fp32 on the emulated GPU must track the CPU to the rounding of different
#   summation orders;
# - bf16 and fp16 must stay near fp32 on the same emulated GPU.
# Every tolerance is derived from the spread measured over the OpenBLAS
# kernel sets and thread counts of tests/matrix.sh and several seeds (SEED=N
# runs this script from another seed), and the comparisons are of quantities
# that move little with summation order: an epoch's mean training loss, and
# top-1 on 512 images, not on a handful. Small sizes keep it to a few
# minutes on two cores. One part per trainer, in tests/emu/trainers/, run
# two at a time (below).
# Usage: tests/emu/test_emu_trainers.sh BUILD_DIR (an EMU=1 build)
set -uo pipefail
build=${1:-build-emu}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
export PROGRESS_INTERVAL_S=1000

for bin in resnet ncf ssd transformer bert fmnist_to_imagenet imagenet_to_lmdb movielens_generate \
  movielens_convert coco_generate coco_to_lmdb wmt_generate wmt_to_lmdb squad_generate squad_to_lmdb; do
  if [[ ! -x $build/bin/$bin ]]; then
    echo "FAIL emu_trainers: $build/bin/$bin is not built"
    exit 1
  fi
done
if ! grep -q "CUDA emulation" <("$build/bin/resnet" --device=cuda --synthetic --synthetic_steps=1 \
  --config=image_classification/configs/small.conf --width=8 --batch_size=2 --log_file="$tmp/probe.log" 2>&1); then
  echo "FAIL emu_trainers: $build is not a build against the CUDA emulation (make EMU=1)"
  exit 1
fi

seed=${SEED:-1}
summary() { grep -E '^resnet: epoch|^error' "$1" | tr '\n' ' '; }
# NAME REF RUN LABEL TOP1_TOL LOSS_TOL: a PASS line when both epochs of the
# ResNet run RUN are within the tolerances of REF's, else a FAIL line.
compare_epochs() {
  local name=$1 ref=$tmp/$2.out run=$tmp/$3.out label=$4 ok=1
  for e in 1 2; do
    close "$(epoch_field "$ref" resnet $e top-1)" "$(epoch_field "$run" resnet $e top-1)" "$5" &&
      close "$(epoch_field "$ref" resnet $e loss)" "$(epoch_field "$run" resnet $e loss)" "$6" || ok=0
  done
  if ((ok)); then
    echo "PASS $name ($(summary "$run"))"
  else
    echo "FAIL $name: $2: $(summary "$ref"); $label: $(summary "$run") $(grep -m1 -i error "$run")"
  fi
}

# NAME BENCH REF RUN TOL: both epochs' mean training losses of BENCH's runs
# REF and RUN within TOL.
compare_losses() {
  local ok=1 bench=$2
  for e in 1 2; do
    close "$(epoch_field "$tmp/$3.out" $bench $e loss)" "$(epoch_field "$tmp/$4.out" $bench $e loss)" "$5" || ok=0
  done
  losses() { grep -E "^$bench: epoch|^error" "$tmp/$1.out" | sed 's/.*\(mean train loss [0-9.]*\).*/\1/' | tr '\n' ' '; }
  if ((ok)); then
    echo "PASS $1 ($4: $(losses $4))"
  else
    echo "FAIL $1: $3: $(losses $3); $4: $(losses $4)"
  fi
}

# The parts (tests/emu/trainers/*.sh) run side by side, EMU_JOBS at a time
# (default 2): a trainer on the emulated GPU keeps one core busy (the
# emulation runs a kernel's blocks one after another), so one part alone
# leaves the second core of a CI machine idle most of the time. Each part
# has a folder of its own under $tmp; its lines are printed in the parts'
# order once all have ended, with how long each took. The longest first
# (2026-11-29, the 2-core VM: ssd about 590 s, ncf 410, resnet 254,
# transformer 219, bert 153), so that the last to start is a short one.
# EMU_PARTS="bert transformer" runs those alone.
read -ra parts <<<"${EMU_PARTS:-ssd ncf resnet transformer bert}"
jobs=${EMU_JOBS:-2}
root=$tmp
for part in "${parts[@]}"; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  (
    tmp=$root/$part
    mkdir -p "$tmp"
    start=$(date +%s)
    source "tests/emu/trainers/$part.sh"
    echo "part $part: $(($(date +%s) - start)) s"
  ) >"$root/$part.lines" 2>&1 &
done
wait
for part in "${parts[@]}"; do cat "$root/$part.lines"; done
