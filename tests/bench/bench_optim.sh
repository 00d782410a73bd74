#!/usr/bin/env bash
# `make bench` entry of the optimizer benchmark: the fused optimizer step over
# BERT-large's parameters beside PyTorch's fused optimizers
# (tests/bench/README.md). Usage: bench_optim.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
if [[ ! -x $build/bench/bench_optim ]]; then
  echo "SKIP bench_optim: $build/bench/bench_optim is not built"
  exit 0
fi
exec python3 tests/bench/bench_optim.py --build "$build"
