#!/usr/bin/env bash
# oneDNN's convolutions under each instruction set below this CPU's best.
# oneDNN picks its kernels by CPU (AVX-512, AVX2, AVX, SSE4.1), so a machine
# with AVX-512 never runs the others' kernels: this script caps oneDNN at
# each (DNNL_MAX_CPU_ISA) and runs test_ops_conv (oneDNN against the plain
# path and the PyTorch goldens, a strided 1x1 case with 4 channels among
# them) and test_ssd_model (whose small model has such convolutions) there.
# A case passes when the program passes and oneDNN says it ran at that cap.
# A kernel writing past its scratch dies in conv.c's guard check.
# Usage: tests/ops/test_conv_isas.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir

if "$build/tests/test_ops_conv" 2>&1 | grep -q "^SKIP conv_library_matches_plain: built without oneDNN"; then
  echo "SKIP conv_library_under_each_isa: built without oneDNN (make DNNL=0)"
  exit 0
fi

# ISA: the cap's name for DNNL_MAX_CPU_ISA, the /proc/cpuinfo flag it needs
# and the words oneDNN's verbose mode prints for it.
for cap in "AVX2 avx2 Intel AVX2" "AVX avx Intel AVX" "SSE41 sse4_1 Intel SSE4.1"; do
  read -r isa flag says <<<"$cap"
  if ! grep -qw "$flag" /proc/cpuinfo; then
    echo "SKIP conv_library_under_$isa: this CPU lacks $flag"
    continue
  fi
  for prog in test_ops_conv test_ssd_model; do
    DNNL_MAX_CPU_ISA=$isa DNNL_VERBOSE=1 "$build/tests/$prog" >"$tmp/$prog.$isa.out" 2>&1
    rc=$?
    ran=$(grep -m1 '^onednn_verbose,info,cpu,isa:' "$tmp/$prog.$isa.out" | sed 's/.*isa://')
    if [[ $rc == 0 ]] && ! grep -q '^FAIL' "$tmp/$prog.$isa.out" && [[ $ran == "$says" ]]; then
      echo "PASS ${prog}_under_$isa"
    else
      echo "FAIL ${prog}_under_$isa: status $rc, oneDNN at \"$ran\"; $(grep -m2 -E '^(FAIL|internal error|error)' "$tmp/$prog.$isa.out" | tr '\n' ' ')"
    fi
  done
done
