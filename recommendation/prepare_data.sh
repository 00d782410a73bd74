#!/usr/bin/env bash
# Prepares the NCF data set of a scale for `make run` (scripts/run.sh):
#   small   generated, 3,000 users (movielens_generate --size=small), CPU
#   medium  generated, ml-20m's shape (138,493 users, 26,744 items, ~20M ratings)
#   full    the real ml-20m: its ratings.csv must be in DATA_DIR or $ML20M_DIR
# then converts ratings.csv into DATA_DIR/ncf.bin. Nothing is redone when
# ncf.bin is already there.
# Usage: prepare_data.sh SCALE DATA_DIR BUILD_DIR
set -euo pipefail
scale=$1 data=$2 build=${3:-build}
[[ -f $data/ncf.bin ]] && exit 0
mkdir -p "$data"
case $scale in
  small) "$build/bin/movielens_generate" --size=small --out="$data" ;;
  medium) "$build/bin/movielens_generate" --size=full --out="$data" ;;
  full)
    src=${ML20M_DIR:-$data}/ratings.csv
    if [[ ! -f $src ]]; then
      echo "prepare_data: $src is missing: download ml-20m.zip from" \
        "https://files.grouplens.org/datasets/movielens/ml-20m.zip, unzip it and set" \
        "ML20M_DIR=<the ml-20m folder> (see recommendation/README.md)" >&2
      exit 2
    fi
    [[ $src == "$data/ratings.csv" ]] || ln -sf "$(realpath "$src")" "$data/ratings.csv" ;;
  *) echo "prepare_data: unknown scale '$scale' (small, medium or full)" >&2; exit 2 ;;
esac
"$build/bin/movielens_convert" --input="$data/ratings.csv" --out="$data"
