#!/usr/bin/env bash
# Prepares the data set `make run BENCH=ssd` trains on, as DATA_DIR/lmdb/{train,val}
# and DATA_DIR/lmdb/categories.json (datasets/coco_to_lmdb):
#   small   generated in the COCO layout (datasets/coco_generate): 4,000 train /
#           500 val images of 128x128, into DATA_DIR/raw, then converted
#   medium  the same generator, 20,000 train / 2,000 val images of 256x256
#   full    COCO 2017, which the user brings: DATA_DIR/raw or $COCO_DIR holding
#           annotations/, train2017/ and val2017/ (see datasets/README.md)
# TRAIN_COUNT, VAL_COUNT and SIDE in the environment override a generated
# scale's sizes. A finished data set of the same sizes is kept; one of other
# sizes is rebuilt.
# Usage: prepare_data.sh SCALE DATA_DIR BUILD_DIR
set -euo pipefail
scale=$1 data=$2 build=${3:-build}
cd "$(dirname "$0")/.."
case $scale in
  small) train=4000 val=500 side=128 ;;
  medium) train=20000 val=2000 side=256 ;;
  full*)
    src=${COCO_DIR:-$data/raw}
    # The trainer reads the val annotations from DATA_DIR/raw: a link to
    # COCO_DIR when the data set lives elsewhere.
    if [[ ! -e $data/raw && -d $src ]]; then
      mkdir -p "$data"
      ln -s "$(realpath "$src")" "$data/raw"
    fi
    if [[ -f $data/lmdb/.complete ]]; then
      echo "prepare_data: COCO LMDB found in $data/lmdb"
      exit 0
    fi
    if [[ ! -f $src/annotations/instances_train2017.json ]]; then
      echo "prepare_data: $src/annotations/instances_train2017.json is missing: download train2017.zip," \
        "val2017.zip and annotations_trainval2017.zip from https://cocodataset.org, unzip them into one" \
        "folder and set COCO_DIR=<that folder> (see datasets/README.md)" >&2
      exit 2
    fi
    rm -rf "$data/lmdb"
    "$build/bin/coco_to_lmdb" --coco="$src" --out="$data/lmdb"
    echo "full" >"$data/lmdb/.complete"
    exit 0 ;;
  *) echo "prepare_data: unknown scale '$scale' (small, medium or full)" >&2; exit 2 ;;
esac
train=${TRAIN_COUNT:-$train} val=${VAL_COUNT:-$val} side=${SIDE:-$side}
stamp="train=$train val=$val side=$side"
marker=$data/lmdb/.complete
if [[ -f $marker && $(cat "$marker") == "$stamp" ]]; then
  echo "prepare_data: $data is ready ($stamp)"
  exit 0
fi
rm -rf "$data/raw" "$data/lmdb"
mkdir -p "$data"
"$build/bin/coco_generate" --out="$data/raw" --train_count="$train" --val_count="$val" --side="$side"
"$build/bin/coco_to_lmdb" --coco="$data/raw" --out="$data/lmdb"
echo "$stamp" >"$marker"
