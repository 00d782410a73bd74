#!/usr/bin/env bash
# `make bench` entry of the GEMM benchmark: op_gemm beside PyTorch on the GEMMs
# of one BERT-large layer (tests/bench/README.md). Usage: bench_gemm.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
if [[ ! -x $build/bench/bench_gemm ]]; then
  echo "SKIP bench_gemm: $build/bench/bench_gemm is not built (a CUDA build is needed)"
  exit 0
fi
exec python3 tests/bench/bench_gemm.py --build "$build" --dtype bf16
