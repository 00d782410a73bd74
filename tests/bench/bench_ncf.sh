#!/usr/bin/env bash
# `make bench` entry of the NCF benchmark: the trainer's training step at batch
# 1,048,576 and its time to HR@10 0.635 on the generated ml-20m-shaped set,
# beside a PyTorch NeuMF (tests/bench/README.md). Makes the data set first
# when it is missing (a few minutes).
# Usage: bench_ncf.sh BUILD_DIR [DATA_DIR [bench_ncf.py flags, e.g. --parts throughput]]
set -uo pipefail
build=${1:-build} data=${2:-data/ncf/medium}
cd "$(dirname "$0")/../.."
source tests/bench/benchlib.sh
bench_require bench_ncf "$build/bin/ncf"
bash recommendation/prepare_data.sh medium "$data" "$build" || exit 1
exec python3 tests/bench/bench_ncf.py --build "$build" --data_dir "$data" \
  --config recommendation/configs/medium.conf "${@:3}"
