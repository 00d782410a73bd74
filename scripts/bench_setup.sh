# scripts/bench_setup.sh: what `make run` and `make seeds` do before they
# train; `source` it, then call bench_setup.
# bench_setup BENCH TASK_DIR SCALE DEVICE BUILD_DIR (messages start with $who): checks the benchmark has
# a trainer, picks the scale when SCALE is empty (medium with a GPU and a
# CUDA build of the trainer, small without), prepares the scale's data set if
# missing, and sets conf (the config file), scale, data (the data folder),
# target (the config's target_accuracy, empty for a full-scale config),
# trainer (the program) and have_gpu (1 when it will run on a GPU).
bench_setup() {
  local bench=$1 dir=$2 device=$4 build=$5
  scale=$3
  if [[ -z $dir ]]; then
    echo "$who: BENCH=$bench is not a benchmark; use resnet, ssd, transformer, ncf or bert" >&2
    exit 2
  fi
  if [[ ! -f $dir/train.c || ! -f $dir/prepare_data.sh ]]; then
    echo "$who: BENCH=$bench is not ready yet: $dir/ has no $([[ -f $dir/train.c ]] &&
      echo prepare_data.sh || echo trainer) (see README.md, Status)" >&2
    exit 2
  fi
  trainer=$build/bin/$bench
  # The medium scale needs a GPU and a CUDA build of the trainer.
  have_gpu=0
  if [[ $device != cpu ]] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    if ldd "$trainer" | grep libcudart >/dev/null; then
      have_gpu=1
    else
      echo "$who: a GPU is present but $trainer was built without CUDA; running on the CPU" >&2
    fi
  fi
  if [[ -z $scale ]]; then
    scale=$([[ $have_gpu == 1 ]] && echo medium || echo small)
  fi
  conf=$dir/configs/$scale.conf
  if [[ ! -f $conf ]]; then
    echo "$who: no config $conf; scales of $bench: $(ls "$dir/configs" | sed 's/\.conf$//' | tr '\n' ' ')" >&2
    exit 2
  fi
  data=data/$bench/$scale
  bash "$dir/prepare_data.sh" "$scale" "$data" "$build"
  # The scaled configs state their target; the checker is told the same one.
  target=$(sed -n 's/^[[:space:]]*target_accuracy[[:space:]]*=[[:space:]]*\([0-9.]*\).*/\1/p' "$conf" | tail -n 1)
}
