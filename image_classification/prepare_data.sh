#!/usr/bin/env bash
# Prepares the data set `make run BENCH=resnet` trains on, as DATA_DIR/lmdb/{train,val}.
#   small, medium: Fashion-MNIST through the ImageNet layout and converter
#                  (datasets/prepare_fmnist_classification.sh)
#   full:          ImageNet, which the user brings (see image_classification/README.md)
# Usage: prepare_data.sh SCALE DATA_DIR BUILD_DIR
set -euo pipefail
scale=$1 data=$2 build=${3:-build}
cd "$(dirname "$0")/.."
case $scale in
  small|medium) exec bash datasets/prepare_fmnist_classification.sh "$scale" "$data" "$build" ;;
  full*)
    if [[ -d $data/lmdb/train && -d $data/lmdb/val ]]; then
      echo "prepare_data: ImageNet LMDB found in $data/lmdb"
      exit 0
    fi
    echo "prepare_data: no ImageNet LMDB in $data/lmdb. Convert your copy of ImageNet first:" >&2
    echo "  $build/bin/imagenet_to_lmdb --root=/path/to/imagenet --out=$data/lmdb" >&2
    exit 2 ;;
  *) echo "prepare_data: unknown scale '$scale' (small, medium, full)" >&2; exit 2 ;;
esac
