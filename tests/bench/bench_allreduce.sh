#!/usr/bin/env bash
# `make bench` entry of the all-reduce benchmark (tests/bench/README.md): the
# suite's gradient all-reduce over MPI ranks, one per GPU through NCCL when
# the machine has two or more GPUs and a CUDA build, else 2 CPU ranks through
# MPI; algorithm and bus bandwidth from 8 B to MAX_BYTES (1 GiB on GPUs,
# 64 MiB on CPU ranks). Writes results/allreduce_<UTC stamp>_<ranks>x<device>.{md,json}.
# Usage: bench_allreduce.sh BUILD_DIR [RANKS] [MAX_BYTES]
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
bin=$build/bench/bench_allreduce
if [[ ! -x $bin ]]; then
  echo "SKIP bench_allreduce: $bin is not built"
  exit 0
fi
if ! command -v mpirun >/dev/null || ! ldd "$bin" | grep -q libmpi; then
  echo "SKIP bench_allreduce: no MPI (mpirun missing or $bin built with MPI=0)"
  exit 0
fi
gpus=0
if nvidia-smi -L >/dev/null 2>&1 && ldd "$bin" | grep -q libcudart; then gpus=$(nvidia-smi -L | wc -l); fi
if ((gpus >= 2)); then
  device=cuda ranks=${2:-$gpus} max=${3:-1073741824}
else
  device=cpu ranks=${2:-2} max=${3:-67108864}
fi
out=tests/bench/results/allreduce_$(date -u +%Y%m%dT%H%M%SZ)_${ranks}x$device
mkdir -p tests/bench/results
mpirun --allow-run-as-root --oversubscribe -np "$ranks" "$bin" --device=$device --max_bytes="$max" \
  --json="$out.json" | tee "$out.txt"
status=${PIPESTATUS[0]}
{ echo "# All-reduce bandwidth, $(date -u '+%Y-%m-%d %H:%M UTC')"; echo; echo '```'; cat "$out.txt"; echo '```'; } >"$out.md"
rm -f "$out.txt"
echo "bench_allreduce: wrote $out.md and $out.json"
exit "$status"
