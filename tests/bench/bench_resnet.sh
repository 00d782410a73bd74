#!/usr/bin/env bash
# `make bench` entry of the ResNet-50 throughput benchmark: our trainer's
# synthetic mode beside torchvision's resnet50 (tests/bench/README.md).
# Usage: bench_resnet.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
if [[ ! -x $build/bin/resnet ]]; then
  echo "SKIP bench_resnet: $build/bin/resnet is not built"
  exit 0
fi
exec python3 tests/bench/bench_resnet.py --build "$build"
