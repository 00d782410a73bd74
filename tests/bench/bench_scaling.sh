#!/usr/bin/env bash
# `make bench` entry of the scaling sweep (tests/bench/README.md): each
# trainer's throughput at 1, 2, 4, 8 ranks (up to the GPUs, or the cores on
# a CPU), scaling efficiency against 1 rank, and on a GPU bf16/fp16 against
# fp32; writes results/scaling_<UTC date>_<machine>.{md,json,png}.
# Usage: bench_scaling.sh BUILD_DIR [scaling.py flags, e.g. --trainers ncf --ranks 1,2]
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
exec python3 tests/bench/scaling.py --build "$build" "${@:2}"
