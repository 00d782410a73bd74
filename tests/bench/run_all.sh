#!/usr/bin/env bash
# `make bench`: runs every benchmark this machine can. Each tests/bench/bench_*.sh
# is one benchmark: it prints its table and writes tests/bench/results/; it
# prints "SKIP <name>: <why>" when this machine lacks what it needs (a GPU,
# PyTorch). Usage: run_all.sh BUILD_DIR [NAME,NAME...]
#   NAMEs (conv, gemm, resnet, ...) run only those benchmarks.
set -uo pipefail
build=${1:-build} only=${2:-}
cd "$(dirname "$0")/../.."
status=0
shopt -s nullglob
for b in tests/bench/bench_*.sh; do
  name=$(basename "$b" .sh)
  [[ -n $only && ",$only," != *",${name#bench_},"* ]] && continue
  echo "== $(basename "$b" .sh)"
  bash "$b" "$build" || status=1
done
exit $status
