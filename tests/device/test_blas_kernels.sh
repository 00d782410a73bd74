#!/usr/bin/env bash
# The trainers' choice of OpenBLAS kernels (device_blas_kernels, device.h),
# on NCF's trainer run to its first error after its flags are read (a data
# folder that does not exist), which is past the choice:
# - OPENBLAS_CORETYPE set by the user is kept: no "blas:" line;
# - where this machine's OpenBLAS picks kernels older than the CPU runs,
#   the trainer runs again in the same process on a newer set and says so
#   once ("blas: OpenBLAS chose its X kernels ...; Y kernels in use", Y not
#   X), then goes on as before: the same single error line and exit status
#   2, seen by the shell that started it (a fork would have returned
#   before). On a machine whose OpenBLAS knows its CPU there is nothing to
#   replace: SKIP.
# Usage: tests/device/test_blas_kernels.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir
trainer=$build/bin/ncf
want_error="error: $tmp/none/ncf.bin: cannot open"
run() {  # OUT ENV...: the trainer to its data error; output in $tmp/OUT, status in $tmp/OUT.rc
  local out=$1
  shift
  env -u OPENBLAS_CORETYPE "$@" "$trainer" --device=cpu --data_dir="$tmp/none" --log_file="$tmp/$out.log" \
    >"$tmp/$out.out" 2>&1
  echo $? >"$tmp/$out.rc"
}
ends_as_before() {  # OUT: exit status 2 and the one data error line
  [[ $(cat "$tmp/$1.rc") == 2 && $(grep -c '^error' "$tmp/$1.out") == 1 ]] &&
    grep -q "^$want_error" "$tmp/$1.out"
}

for set in Prescott Haswell; do
  run user_$set OPENBLAS_CORETYPE=$set
  if ends_as_before user_$set && ! grep -q '^blas:' "$tmp/user_$set.out"; then
    echo "PASS blas_user_coretype_kept ($set)"
  else
    echo "FAIL blas_user_coretype_kept ($set): status $(cat "$tmp/user_$set.rc");" \
      "$(grep -E '^(blas|error)' "$tmp/user_$set.out" | tr '\n' ' ')"
  fi
done

run own
note=$(grep '^blas:' "$tmp/own.out")
if [[ -z $note ]]; then
  echo "SKIP blas_older_kernels_replaced: this machine's OpenBLAS chose kernels as new as its CPU"
  exit 0
fi
chose=$(sed -n 's/^blas: OpenBLAS chose its \([A-Za-z0-9_]*\) kernels.*/\1/p' <<<"$note")
using=$(sed -n 's/.*; \([A-Za-z0-9_]*\) kernels in use.*/\1/p' <<<"$note")
if ends_as_before own && [[ $(grep -c '^blas:' "$tmp/own.out") == 1 && -n $chose && -n $using &&
  ${chose,,} != "${using,,}" ]] && [[ $(grep -c '"key": "init_start"' "$tmp/own.log") == 1 ]]; then
  echo "PASS blas_older_kernels_replaced ($chose -> $using)"
else
  echo "FAIL blas_older_kernels_replaced: status $(cat "$tmp/own.rc"); $(grep -E '^(blas|error)' "$tmp/own.out" | tr '\n' ' ')"
fi
