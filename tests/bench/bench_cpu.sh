#!/usr/bin/env bash
# make bench-cpu: the small trainers' CPU steps beside PyTorch eager
# (tests/bench/bench_cpu.py). PyTorch comes from this python when it has it,
# else it is installed once into BUILD_DIR/torch-site: the CPU wheel from
# download.pytorch.org where that is reachable, else PyPI's (which brings
# CUDA libraries; on a machine without a GPU they stay unused).
# Usage: tests/bench/bench_cpu.sh [BUILD_DIR] [bench_cpu.py flags...]
set -euo pipefail
build=${1:-build}
shift || true
cd "$(dirname "$0")/../.."
python=${PYTHON:-python3}
if ! "$python" -c 'import torch' 2>/dev/null; then
  site=$PWD/$build/torch-site
  export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}
  if ! "$python" -c 'import torch' 2>/dev/null; then
    echo "bench-cpu: installing PyTorch into $site (once; PyPI's wheels are several GB)"
    "$python" -m pip install -q --target "$site" torch --index-url https://download.pytorch.org/whl/cpu \
      2>/dev/null || "$python" -m pip install -q --target "$site" torch
  fi
fi
exec "$python" tests/bench/bench_cpu.py --build "$build" "$@"
