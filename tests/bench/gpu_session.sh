#!/usr/bin/env bash
# Everything that needs a GPU, for a machine that has one, in three parts
# (each fits one 10-minute call; PART all runs them in turn):
#   tests  every test (the CUDA op, runtime and trainer tests run instead of
#          skipping), and op_errors.md: every GPU-vs-CPU comparison's measured
#          error beside its tolerance (tests/error_table.py)
#   bench  every benchmark (tables and tests/bench/results/ files; bench_ncf
#          includes NCF's medium time to target beside PyTorch); bench:A,B
#          runs only those (e.g. bench:conv,gemm,optim,loader,decode, then
#          bench:resnet, then bench:ncf, when all of them would pass the
#          10-minute limit of one call)
#   ttt    the medium ResNet run to its target, beside PyTorch
# Usage: tests/bench/gpu_session.sh BUILD_DIR LIB_DIR OUT_DIR [PART]
#   LIB_DIR: liblmdb.so.0 and libturbojpeg.so.0 when the machine lacks them
set -uo pipefail
build=${1:-build} libs=${2:-.carry} out=${3:-gpu-session} part=${4:-all}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PROGRESS_INTERVAL_S=30 PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"

if [[ $part == all || $part == tests ]]; then
  echo "== tests"
  rm -f "$out/errors.tsv"
  TEST_ERROR_TABLE=$(realpath "$out")/errors.tsv bash tests/run_tests.sh "$build" 2>&1 |
    tee "$out/tests.txt" | tail -n 40
  # Every GPU-vs-CPU comparison's measured error beside its tolerance.
  python3 tests/error_table.py "$out/errors.tsv" --out "$out/op_errors.md" >/dev/null
  grep -E '^[0-9]+ comparisons' "$out/op_errors.md"
fi

if [[ $part == all || $part == bench || $part == bench:* ]]; then
  echo "== benchmarks"
  only=""
  [[ $part == bench:* ]] && only=${part#bench:}
  bash tests/bench/run_all.sh "$build" "$only" 2>&1 | tee "$out/bench.txt"
  cp tests/bench/results/* "$out/" 2>/dev/null
fi

if [[ $part == all || $part == ttt ]]; then
  echo "== resnet medium: time to train, beside PyTorch"
  data=data/resnet/medium
  bash image_classification/prepare_data.sh medium "$data" "$build" >"$out/prepare_resnet.txt" 2>&1
  "$build/bin/resnet" --config=image_classification/configs/medium.conf --data_dir="$data" \
    --device=cuda --log_file="$out/resnet_medium.log" 2>&1 | grep -v ':::MLLOG' |
    tee "$out/resnet_medium.txt" | tail -n 5
  python3 image_classification/pytorch_reference.py --config=image_classification/configs/medium.conf \
    --raw="$data/raw" --device=cuda 2>&1 | tee "$out/resnet_medium_pytorch.txt" | tail -n 3
fi
