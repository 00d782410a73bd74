#!/usr/bin/env bash
# Prepares a scaled image-classification data set from Fashion-MNIST, through
# the same raw ImageNet layout and converter as the full benchmark:
#   fmnist_to_imagenet  -> OUT_DIR/raw/{train/<wnid>/*.JPEG, val/*.JPEG,
#                                       LOC_val_solution.csv, classes.txt}
#   imagenet_to_lmdb    -> OUT_DIR/lmdb/{train, val, classes.txt}
# Scales (10 classes):
#   small:  all 60,000 training images + all 10,000 test images, 32x32
#   medium: all 60,000 training images + all 10,000 test images, 64x64
# TRAIN_COUNT, VAL_COUNT and SIDE in the environment override a scale's sizes.
# A finished data set with the same sizes is kept; one with other sizes is
# rebuilt.
# Usage: datasets/prepare_fmnist_classification.sh SCALE [OUT_DIR] [BUILD_DIR]
#        (OUT_DIR default data/resnet/SCALE, BUILD_DIR default build)
set -euo pipefail
scale=${1:-}
out=${2:-data/resnet/$scale}
build=${3:-build}
case $scale in
  small) train=60000 val=10000 side=32 ;;
  medium) train=60000 val=10000 side=64 ;;
  *) echo "prepare_fmnist_classification: SCALE '$scale' is not small or medium" >&2; exit 2 ;;
esac
train=${TRAIN_COUNT:-$train} val=${VAL_COUNT:-$val} side=${SIDE:-$side}
for tool in fmnist_to_imagenet imagenet_to_lmdb; do
  if [[ ! -x $build/bin/$tool ]]; then
    echo "prepare_fmnist_classification: $build/bin/$tool missing; run make first" >&2
    exit 2
  fi
done

stamp="train=$train val=$val side=$side"
marker=$out/lmdb/.complete
if [[ -f $marker && $(cat "$marker") == "$stamp" ]]; then
  echo "prepare_fmnist_classification: $out is ready ($stamp)"
  exit 0
fi
rm -rf "$out/raw" "$out/lmdb"
mkdir -p "$out"
echo "prepare_fmnist_classification: $scale: $stamp -> $out"
"$build/bin/fmnist_to_imagenet" --out="$out/raw" --side="$side" --train_count="$train" \
  --val_count="$val"
"$build/bin/imagenet_to_lmdb" --root="$out/raw" --out="$out/lmdb"
echo "$stamp" >"$marker"
echo "prepare_fmnist_classification: done: $out/lmdb/train ($train), $out/lmdb/val ($val)"
