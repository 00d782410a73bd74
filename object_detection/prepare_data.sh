#!/usr/bin/env bash
# Prepares the data set `make run BENCH=ssd` trains on, as DATA_DIR/lmdb/{train,val}
# and DATA_DIR/lmdb/categories.json (datasets/coco_to_lmdb):
#   small   generated in the COCO layout (datasets/coco_generate): 4,000 train /
#           500 val images of 128x128, into DATA_DIR/raw, then converted
#   medium  the same generator, 20,000 train / 2,000 val images of 256x256
#   full    COCO 2017, which the user brings: DATA_DIR/raw or $COCO_DIR holding
#           annotations/, train2017/ and val2017/ (see datasets/README.md); val
#           keeps the images with annotations, the reference's eval set (4,952
#           of 5,000). And the backbone the full configs start from: the
#           user's torchvision ImageNet ResNet-34 weights, resnet34-333f7ec4.pth
#           (the reference's download_resnet34_backbone.sh fetches it) or the
#           same name newer torchvision gives them, resnet34-b627a593.pth, in
#           DATA_DIR or torchvision's cache ($TORCH_HOME/hub/checkpoints), or
#           $RESNET34_PTH, converted by datasets/torch_to_ckpt.py into
#           DATA_DIR/resnet34.ckpt. Nothing is downloaded.
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
    backbone=$data/resnet34.ckpt
    if [[ ! -f $backbone ]]; then
      cache=${TORCH_HOME:-$HOME/.cache/torch}/hub/checkpoints
      pth=${RESNET34_PTH:-}
      if [[ -n $pth && ! -f $pth ]]; then
        echo "prepare_data: RESNET34_PTH=$pth is not a file (torchvision's resnet34-333f7ec4.pth)" >&2
        exit 2
      fi
      for name in resnet34-333f7ec4.pth resnet34-b627a593.pth; do
        for dir in "$data" "$cache"; do
          [[ -z $pth && -f $dir/$name ]] && pth=$dir/$name
        done
      done
      if [[ -z $pth ]]; then
        echo "prepare_data: no resnet34-333f7ec4.pth in $data or $cache: the full configs start the backbone" \
          "from torchvision's ImageNet ResNet-34; download https://download.pytorch.org/models/resnet34-333f7ec4.pth" \
          "into $data (or set RESNET34_PTH=<file>; see object_detection/README.md)" >&2
        exit 2
      fi
      mkdir -p "$data"
      python3 datasets/torch_to_ckpt.py --in="$pth" --out="$backbone" --arch=resnet34 --layers=3
    fi
    # The trainer reads the val annotations from DATA_DIR/raw: a link to
    # COCO_DIR when the data set lives elsewhere.
    if [[ ! -e $data/raw && -d $src ]]; then
      mkdir -p "$data"
      ln -s "$(realpath "$src")" "$data/raw"
    fi
    stamp="full val_images=annotated"
    if [[ -f $data/lmdb/.complete && $(cat "$data/lmdb/.complete") == "$stamp" ]]; then
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
    "$build/bin/coco_to_lmdb" --coco="$src" --out="$data/lmdb" --val_images=annotated
    echo "$stamp" >"$data/lmdb/.complete"
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
