# tests/bench/benchlib.sh: what the bench_*.sh entries that run a trainer
# beside PyTorch share; `source` it from the repository root.
# shellcheck shell=bash

# bench_require NAME PROGRAM [MODULE...]: prints "SKIP NAME: <why>" and exits
# 0 when PROGRAM is not built, or when python3 lacks torch (or one of the
# MODULEs) or PyTorch sees no GPU.
bench_require() {
  local name=$1 program=$2 modules
  modules=$(IFS=,; echo "torch${3:+,${*:3}}")
  if [[ ! -x $program ]]; then
    echo "SKIP $name: $program is not built"
    exit 0
  fi
  if ! python3 -c "import sys, $modules; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    echo "SKIP $name: PyTorch${3:+ (with ${*:3})} is not installed or sees no GPU"
    exit 0
  fi
}
