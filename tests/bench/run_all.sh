#!/usr/bin/env bash
# `make bench`: runs every benchmark this machine can. Each prints its table
# and writes tests/bench/results/; it prints "SKIP <name>: <why>" when this
# machine lacks what it needs (a GPU, PyTorch, the program).
# Usage: [BENCH_PRECISIONS=bf16,fp32] run_all.sh BUILD_DIR [NAME,NAME...]
#   NAMEs (conv, gemm, resnet, ...) run only those benchmarks;
#   BENCH_PRECISIONS is passed as --precisions to the table's scripts that
#   take it (resnet, transformer, bert), to fit a short GPU call.
# A benchmark is a row of the table below (a built program and the Python
# script that runs it beside PyTorch), or a tests/bench/bench_*.sh of its own
# (decode, loader, ncf, ssd, allreduce, scaling: each checks what it needs and
# passes its own flags; a row as well would run it twice).
set -uo pipefail
build=${1:-build} only=${2:-}
cd "$(dirname "$0")/../.."
# name    program it needs     how it runs (with --build BUILD_DIR)
table="
conv      bench/bench_conv     tests/bench/bench_conv.py --dtype bf16 --batch 256
gemm      bench/bench_gemm     tests/bench/bench_gemm.py --dtype bf16
optim     bench/bench_optim    tests/bench/bench_optim.py
resnet    bin/resnet           tests/bench/bench_resnet.py
transformer bin/transformer    tests/bench/bench_transformer.py
bert      bin/bert             tests/bench/bench_bert.py
"
wanted() { [[ -z $only || ",$only," == *",$1,"* ]]; }
status=0
while read -r name program script args; do
  [[ -n $name ]] && wanted "$name" || continue
  echo "== bench_$name"
  if [[ ! -x $build/$program ]]; then
    echo "SKIP bench_$name: $build/$program is not built"
    continue
  fi
  if [[ -n ${BENCH_PRECISIONS:-} ]] && grep -q -- '"--precisions"' "$script"; then
    args+=" --precisions $BENCH_PRECISIONS"
  fi
  # shellcheck disable=SC2086  # args: the table's flags, split on spaces
  python3 "$script" --build "$build" $args || status=1
done <<<"$table"
shopt -s nullglob
for b in tests/bench/bench_*.sh; do
  name=$(basename "$b" .sh)
  wanted "${name#bench_}" || continue
  echo "== $name"
  bash "$b" "$build" || status=1
done
exit $status
