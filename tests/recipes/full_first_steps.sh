#!/usr/bin/env bash
# The first training steps of every full config (check_recipes.py --list:
# full*.conf, *_reference.conf, *_nvidia.conf) at the full model's size, on
# the CPU: each config's model and optimizer built as the config says, then
# the trainer's throughput mode, which trains on data that needs no full
# data set, its warm-up steps and one timed step:
#   resnet, ssd    --synthetic: random images on the device (10 warm-up steps)
#   transformer    --bench_steps: random pairs of max_length tokens a side (5)
#   ncf            --bench_steps on the small generated set (prepare_data.sh
#                  small): its users and items, so the embedding tables are
#                  the small set's; the layers are the config's (5)
#   bert           --bench_steps: random windows, random weights in the shape
#                  of BERT-large's config.json (tests/bench/bench_bert.py's);
#                  windows of 64 tokens, not the config's 384 (5)
# What the CPU cannot hold or do is overridden: fp32, batch 1 (transformer:
# one pair; ncf: 1024 samples), one loader thread, eval batch 1. A run
# passes when it exits 0 and its step's loss is a finite number; each line
# gives its time and peak memory.
# Usage: tests/recipes/full_first_steps.sh [BUILD_DIR [BENCH...]] (make
# test-full-configs): BENCH names limit it to those benchmarks' configs.
# About 24 minutes on 2 cores (tests/README.md): not part of make test.
set -uo pipefail
build=${1:-build}
shift $(($# > 0 ? 1 : 0))
only=" $* "
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir

# The effective value of a key for a config (the trainer's --print_config).
effective() { "$build/bin/$1" --config="$2" --print_config | sed -n "s/^config: $3 = \(.*\)  # .*/\1/p"; }

# The flags that make a bench's full config take its first steps on the CPU.
first_step_flags() {
  local bench=$1 conf=$2
  case $bench in
    resnet | ssd) echo --synthetic --synthetic_steps=1 --batch_size=1 --loader_threads=1 ;;
    transformer)
      # One pair a batch: max_tokens must hold a pair of max_length tokens.
      echo --bench_steps=1 --max_tokens=$(($(effective transformer "$conf" max_length) + 1)) --eval_batch=1 ;;
    ncf) echo --bench_steps=1 --batch_size=1024 --data_dir="$ncf_data" ;;
    bert) echo --bench_steps=1 --batch_size=1 --eval_batch=1 --max_seq_length=64 --init_checkpoint="$tmp/bert-large" ;;
  esac
}

ncf_data=data/ncf/small
if ! bash recommendation/prepare_data.sh small "$ncf_data" "$build" >"$tmp/ncf_data.out" 2>&1; then
  echo "FAIL first_steps: recommendation/prepare_data.sh small: $(tail -n 1 "$tmp/ncf_data.out")"
  exit 1
fi
mkdir -p "$tmp/bert-large"
python3 -c 'import sys; sys.path[:0] = ["tests/bench"]; import bench_bert
bench_bert.write_config(sys.argv[1], bench_bert.LARGE)' "$tmp/bert-large"

failed=0 passed=0
configs=$(python3 tests/recipes/check_recipes.py --list) || exit 1
while read -r bench conf; do
  [[ $only == "  " || $only == *" $bench "* ]] || continue
  name=first_steps_${bench}_$(basename "$conf" .conf)
  if [[ ! -x $build/bin/$bench ]]; then
    echo "FAIL $name: $build/bin/$bench is not built"
    failed=$((failed + 1))
    continue
  fi
  read -ra flags <<<"$(first_step_flags "$bench" "$conf")"
  out=$tmp/$name.out
  start=$(date +%s.%N)
  /usr/bin/time -f "peak %M KB" -o "$tmp/$name.time" "$build/bin/$bench" --config="$conf" \
    --device=cpu --precision=fp32 --log_file="$tmp/$name.log" "${flags[@]}" >"$out" 2>&1
  rc=$?
  seconds=$(python3 -c "import sys; print('%.0f' % (float(sys.argv[2]) - float(sys.argv[1])))" \
    "$start" "$(date +%s.%N)")
  peak=$(sed -n 's/^peak \([0-9]*\) KB/\1/p' "$tmp/$name.time")
  loss=$(grep -o '(loss [^)]*)' "$out" | head -n 1 | sed 's/(loss \(.*\))/\1/')
  what="$seconds s, peak $((${peak:-0} / 1024)) MB, loss ${loss:-none}"
  if [[ $rc == 0 ]] && python3 -c "import math, sys; sys.exit(not math.isfinite(float(sys.argv[1])))" \
    "${loss:-x}" 2>/dev/null; then
    echo "PASS $name ($what)"
    passed=$((passed + 1))
  else
    echo "FAIL $name: exit $rc, $what: $(grep -E '^error|HINT' "$out" | head -n 1)"
    failed=$((failed + 1))
  fi
done <<<"$configs"
echo "$passed passed, $failed failed, 0 skipped"
((failed == 0))
