#!/usr/bin/env bash
# datasets/prepare_fmnist_classification.sh on a small subset: the LMDBs hold
# the asked-for counts, a second run keeps a finished data set, other sizes
# rebuild it, and a bad scale is refused.
# Usage: tests/datasets/test_converter_prepare.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
script=datasets/prepare_fmnist_classification.sh
scratch_dir

if [[ ! -d /usr/share/datasets/fashion-mnist ]]; then
  echo "SKIP prepare_subset: /usr/share/datasets/fashion-mnist missing (dataset-fashion-mnist)"
  exit 0
fi
entries() { mdb_stat "$1" | awk '/Entries:/ {print $2}'; }

out=$tmp/small
TRAIN_COUNT=300 VAL_COUNT=70 SIDE=24 bash "$script" small "$out" "$build" >"$tmp/log1" 2>&1
check prepare_subset_counts [ "$(entries "$out/lmdb/train")/$(entries "$out/lmdb/val")" = "300/70" ]
check prepare_subset_raw_files [ "$(find "$out/raw/train" -name '*.JPEG' | wc -l)" = 300 ]

TRAIN_COUNT=300 VAL_COUNT=70 SIDE=24 bash "$script" small "$out" "$build" >"$tmp/log2" 2>&1
check prepare_keeps_finished grep -q "is ready (train=300 val=70 side=24)" "$tmp/log2"

TRAIN_COUNT=200 VAL_COUNT=50 SIDE=24 bash "$script" small "$out" "$build" >"$tmp/log3" 2>&1
check prepare_rebuilds_other_sizes [ "$(entries "$out/lmdb/train")/$(entries "$out/lmdb/val")" = "200/50" ]

bash "$script" huge "$out" "$build" >"$tmp/log4" 2>&1
status=$?
check prepare_refuses_bad_scale [ "$status" = 2 ]
check prepare_bad_scale_message grep -q "SCALE 'huge' is not small or medium" "$tmp/log4"
