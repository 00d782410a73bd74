#!/usr/bin/env bash
# `make bench` entry of the convolution benchmark: op_conv2d_* beside PyTorch on
# the 53 convolutions of ResNet-50 v1.5 (tests/bench/README.md).
# Usage: bench_conv.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
if [[ ! -x $build/bench/bench_conv ]]; then
  echo "SKIP bench_conv: $build/bench/bench_conv is not built"
  exit 0
fi
exec python3 tests/bench/bench_conv.py --build "$build" --dtype bf16 --batch 256
