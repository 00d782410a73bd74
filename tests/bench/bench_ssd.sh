#!/usr/bin/env bash
# `make bench` entry of the SSD benchmark: the trainer's synthetic training
# step (SSD300-ResNet34, batch 32 as the MLPerf reference) beside a PyTorch
# SSD300 of the reference's definition, fp32, tf32, bf16 and fp16, and bf16
# under torch.compile (tests/bench/README.md).
# Usage: bench_ssd.sh BUILD_DIR [bench_ssd.py flags, e.g. --batch 32,64]
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/bench/benchlib.sh
bench_require bench_ssd "$build/bin/ssd" torchvision
exec python3 tests/bench/bench_ssd.py --build "$build" --compile bf16 "${@:2}"
