#!/usr/bin/env bash
# Everything that needs a GPU, in one go, for a machine that has one:
#   1. every test (the CUDA op, runtime and trainer tests run instead of skipping)
#   2. every benchmark (tables and tests/bench/results/ files)
#   3. the medium ResNet and NCF runs to their targets, beside PyTorch
# Usage: tests/bench/gpu_session.sh BUILD_DIR LIB_DIR OUT_DIR
#   LIB_DIR: liblmdb.so.0 and libturbojpeg.so.0 when the machine lacks them
set -uo pipefail
build=${1:-build} libs=${2:-.carry} out=${3:-gpu-session}
cd "$(dirname "$0")/../.."
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PROGRESS_INTERVAL_S=30 PYTHONUNBUFFERED=1
nvidia-smi -L | tee "$out/gpu.txt"
date -u | tee -a "$out/gpu.txt"

echo "== tests"
bash tests/run_tests.sh "$build" 2>&1 | tee "$out/tests.txt" | tail -n 40

echo "== benchmarks"
bash tests/bench/run_all.sh "$build" 2>&1 | tee "$out/bench.txt"
cp tests/bench/results/* "$out/" 2>/dev/null

echo "== medium time to train"
for bench in resnet ncf; do
  dir=$([[ $bench == resnet ]] && echo image_classification || echo recommendation)
  data=data/$bench/medium
  bash "$dir/prepare_data.sh" medium "$data" "$build" >"$out/prepare_$bench.txt" 2>&1
  "$build/bin/$bench" --config="$dir/configs/medium.conf" --data_dir="$data" --device=cuda \
    --log_file="$out/${bench}_medium.log" 2>&1 | grep -v ':::MLLOG' | tee "$out/${bench}_medium.txt" | tail -n 5
done
python3 image_classification/pytorch_reference.py --config=image_classification/configs/medium.conf \
  --raw=data/resnet/medium/raw --device=cuda 2>&1 | tee "$out/resnet_medium_pytorch.txt" | tail -n 3
