#!/usr/bin/env bash
# Runs every test program and script and adds up their case lines:
#   PASS name | FAIL name: ... | SKIP name: ...
# A program that exits non-zero without a FAIL line (a crash) counts as one
# failure. The last line is "N passed, N failed, N skipped".
# Usage: tests/run_tests.sh BUILD_DIR [FILTER]
# FILTER: space-separated parts of names; a program runs when its name holds
# any of them.
# With SANITIZE=1 (make test-san) only the C test programs run. With EMU=1
# (make test-emu) only the C test programs run, built against the
# CPU emulation of CUDA (tests/emu/README.md): their CUDA cases then check
# the CUDA code's logic, not a GPU. With them run test_dist.sh (two ranks)
# and tests/emu/test_*.sh; then the C programs and test_dist.sh once more
# with EMU_REVERSE=1 (blocks, threads and the streams' work in the other
# order), shown as "name [reverse]".
set -uo pipefail
build=${1:-build}
filter=${2:-${TEST_FILTER:-}}
cd "$(dirname "$0")/.."

progs=()
for t in "$build"/tests/test_*; do [[ -x $t ]] && progs+=("$t"); done
if [[ ${EMU:-0} == 1 ]]; then
  echo "CUDA cases run on the CPU emulation of CUDA (tests/emu), not on a GPU"
  # test_dist.sh: two MPI ranks, whose GPU cases go through NCCL (over MPI).
  reverse=("${progs[@]}" tests/train/test_dist.sh)
  for t in tests/train/test_dist.sh tests/emu/test_*.sh; do [[ -f $t ]] && progs+=("$t"); done
  for t in "${reverse[@]}"; do progs+=("reverse:$t"); done
elif [[ ${SANITIZE:-0} == 1 ]]; then
  # The sanitizer build (make test-san): the C programs only. Any report of
  # AddressSanitizer or UndefinedBehaviorSanitizer ends the program with a
  # non-zero status, which counts as a failure. Leaks are not checked: the
  # children that tests fork to die on bad input exit without freeing.
  echo "C test programs under AddressSanitizer and UndefinedBehaviorSanitizer"
  export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
else
  # The scripts of every part of tests/, but the emulator's (make test-emu).
  for t in tests/*/test_*.py tests/*/test_*.sh; do
    [[ -f $t && $t != tests/emu/*.sh ]] && progs+=("$t")
  done
fi

passed=0 failed=0 skipped=0
failed_names=()
logdir=$(mktemp -d)
for entry in "${progs[@]}"; do
  t=${entry#reverse:}
  name=$(basename "$t")
  if [[ -n $filter ]]; then
    wanted=0
    for part in $filter; do [[ $name == *"$part"* ]] && wanted=1; done
    ((wanted)) || continue
  fi
  envs=()
  if [[ $entry == reverse:* ]]; then envs=(EMU_REVERSE=1); name="$name [reverse]"; fi
  log="$logdir/${name// /_}.log"
  start=$(date +%s)
  case $t in
    *.py) env "${envs[@]}" python3 "$t" "$build" >"$log" 2>&1 ;;
    *.sh) env "${envs[@]}" bash "$t" "$build" >"$log" 2>&1 ;;
    *) env "${envs[@]}" "$t" >"$log" 2>&1 ;;
  esac
  rc=$?
  p=$(grep -c '^PASS ' "$log"); f=$(grep -c '^FAIL ' "$log"); s=$(grep -c '^SKIP ' "$log")
  if ((rc != 0 && f == 0)); then
    f=1
    echo "FAIL $name: exited with status $rc and no FAIL line; last output:" >>"$log"
    tail -n 5 "$log" | sed 's/^/    /' >>"$log"
  fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  printf '%-28s %3d passed %3d failed %3d skipped  %4ds\n' "$name" "$p" "$f" "$s" $(( $(date +%s) - start ))
  grep -E '^(FAIL|SKIP|  also) ' "$log" | sed 's/^/    /'
  ((f > 0)) && failed_names+=("$name")
done
if ((${#failed_names[@]})); then
  echo "failed programs: ${failed_names[*]} (full output of each: rerun it alone)"
fi
rm -rf "$logdir"
echo "$passed passed, $failed failed, $skipped skipped"
((failed == 0))
