#!/usr/bin/env bash
# `make run`: prepare the benchmark's data set for the scale if missing, train
# to the target, write the MLPerf log under logs/<bench>/, print the time to
# train and the compliance verdict.
# Usage: run.sh BENCH TASK_DIR SCALE DEVICE BUILD_DIR [TRAINER_FLAG...]
#   TASK_DIR comes from the Makefile's table (BENCH_DIR_<bench>), empty for an
#   unknown BENCH; SCALE or DEVICE may be empty; the flags after BUILD_DIR
#   (make run ARGS='--seed=3 --max_epochs=2') go to the trainer last, so they
#   override the config.
set -euo pipefail
bench=${1:-resnet} dir=${2:-} scale=${3:-} device=${4:-auto} build=${5:-build}
shift $(($# < 5 ? $# : 5))
cd "$(dirname "$0")/.."
who="make run"
source scripts/bench_setup.sh
bench_setup "$bench" "$dir" "$scale" "$device" "$build"

log=logs/$bench/$scale-$(date +%Y%m%d-%H%M%S).log
echo "make run: $bench, scale $scale, device $device, config $conf, log $log"
"$trainer" --config="$conf" --device="$device" --data_dir="$data" --log_file="$log" "$@"
python3 logs/result.py ${target:+--target "$target"} --require-success "$log"
