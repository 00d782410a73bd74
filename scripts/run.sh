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

if [[ -z $dir ]]; then
  echo "make run: BENCH=$bench is not a benchmark; use resnet, ssd, transformer, ncf or bert" >&2
  exit 2
fi
if [[ ! -f $dir/train.c || ! -f $dir/prepare_data.sh ]]; then
  echo "make run: BENCH=$bench is not ready yet: $dir/ has no $([[ -f $dir/train.c ]] &&
    echo prepare_data.sh || echo trainer) (see README.md, Status)" >&2
  exit 2
fi

# The medium scale needs a GPU and a CUDA build of the trainer.
have_gpu=0
if [[ $device != cpu ]] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  if ldd "$build/bin/$bench" | grep libcudart >/dev/null; then
    have_gpu=1
  else
    echo "make run: a GPU is present but $build/bin/$bench was built without CUDA; running on the CPU" >&2
  fi
fi
if [[ -z $scale ]]; then
  scale=$([[ $have_gpu == 1 ]] && echo medium || echo small)
fi
conf=$dir/configs/$scale.conf
if [[ ! -f $conf ]]; then
  echo "make run: no config $conf; scales of $bench: $(ls $dir/configs | sed 's/\.conf$//' | tr '\n' ' ')" >&2
  exit 2
fi

data=data/$bench/$scale
bash "$dir/prepare_data.sh" "$scale" "$data" "$build"

log=logs/$bench/$scale-$(date +%Y%m%d-%H%M%S).log
echo "make run: $bench, scale $scale, device $device, config $conf, log $log"
"$build/bin/$bench" --config="$conf" --device="$device" --data_dir="$data" --log_file="$log" "$@"
# The scaled configs state their target; the checker is told the same one.
target=$(sed -n 's/^[[:space:]]*target_accuracy[[:space:]]*=[[:space:]]*\([0-9.]*\).*/\1/p' "$conf" | tail -n 1)
python3 logs/result.py ${target:+--target "$target"} --require-success "$log"
