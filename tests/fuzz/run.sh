#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD SECONDS "TARGETS": runs each libFuzzer target of
# BUILD/bin for SECONDS, FUZZ_JOBS at a time (default: the cores, at most 2;
# a libFuzzer run keeps one core busy), and prints one row per target:
# executions, seconds, coverage (libFuzzer's cov and ft), corpus size, the
# share of parser calls that returned rather than stopping on bad input, and
# the result. Exits 1 when a target found something (crash, sanitizer
# report, hang, out of memory, internal error, a harness's own check); the
# input is under BUILD/findings/<target>/, the output under
# BUILD/logs/<target>.log. The corpus a target grows is kept in
# BUILD/corpus/<target>/ and fuzzed on from there next time.
# FUZZ_TIMEOUT: seconds one input may take before it counts as a hang (20).
# FUZZ_MAX_LEN: the largest input to try (libFuzzer's default: 4096 bytes, or
# the largest seed).
set -uo pipefail

build=$1 seconds=$2 targets=$3
timeout=${FUZZ_TIMEOUT:-20}
rows=() failed=0

# The libFuzzer status line fields of a log: "cov ft corpus".
last_status() {
  grep -E '^#[0-9]+' "$1" | grep -E 'cov: [0-9]+' | tail -n 1 |
    sed -E 's/.*cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+)\/.*/\1 \2 \3/;t;s/.*/- - -/'
}

# What the fuzzer reported when it stopped with an error.
finding() {
  local log=$1 what
  what=$(grep -m 1 -oE 'ERROR: libFuzzer: (deadly signal|[a-z-]+)|ERROR: AddressSanitizer: [a-z-]+|runtime error|fuzz: oracle failed|fuzz: internal error|ERROR: LeakSanitizer' "$log")
  echo "${what:-exit status $2}"
}

# fuzz_one TARGET: one target's run; its row goes to BUILD/logs/TARGET.row;
# fails when the target is missing or found something.
fuzz_one() {
  local t=$1
  bin=$build/bin/fuzz_$t
  if [[ ! -x $bin ]]; then
    echo "fuzz: no target '$t' (built: $(ls "$build/bin" | sed -n 's/^fuzz_//p' | grep -vx seeds | tr '\n' ' '))" >&2
    return 1
  fi
  corpus=$build/corpus/$t findings=$build/findings/$t log=$build/logs/$t.log
  mkdir -p "$corpus" "$findings" "$build/logs"
  seeds=()
  for d in "$build/seeds/$t" "tests/fuzz/corpus/$t"; do [[ -d $d ]] && seeds+=("$d"); done
  echo "fuzz: $t for ${seconds}s (log $log)"
  start=$(date +%s)
  ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
    "$bin" -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=2048 -detect_leaks=0 \
    ${FUZZ_MAX_LEN:+-max_len="$FUZZ_MAX_LEN"} -print_final_stats=1 -artifact_prefix="$findings/" \
    "$corpus" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [[ -n $runs ]] || runs=$(grep -oE '^#[0-9]+' "$log" | tail -n 1 | tr -d '#')
  read -r cov ft corp <<<"$(last_status "$log")"
  calls=$(sed -nE 's/^fuzz: parser calls: ([0-9]+) returned, ([0-9]+) failed checks, ([0-9]+) bad input/\1 \2 \3/p' "$log" | tail -n 1)
  share=-
  if [[ -n $calls ]]; then
    read -r ok fail bad <<<"$calls"
    (( ok + fail + bad > 0 )) && share=$(awk -v a="$ok" -v n=$((ok + fail + bad)) 'BEGIN { printf "%.2f%%", 100 * a / n }')
  fi
  if (( rc == 0 )); then
    result=ok
  else
    unit=$(sed -nE 's/.*Test unit written to (.*)$/\1/p' "$log" | tail -n 1)
    result="FOUND $(finding "$log" "$rc")${unit:+: $unit}"
  fi
  printf '%-17s %12s %8s %6s %7s %7s %9s  %s\n' "$t" "${runs:--}" "$took" "$cov" "$ft" \
    "$corp" "$share" "$result" >"$build/logs/$t.row"
  [[ $result == ok ]]
}

jobs=${FUZZ_JOBS:-$(( $(nproc) < 2 ? $(nproc) : 2 ))}
for t in $targets; do
  while (($(jobs -rp | wc -l) >= jobs)); do wait -n; done
  rm -f "$build/logs/$t.row"
  fuzz_one "$t" &
done
wait
# A target without a row (missing) or with a finding fails the run.
for t in $targets; do
  row=$build/logs/$t.row
  if [[ -f $row ]]; then
    rows+=("$(cat "$row")")
    [[ $(cat "$row") == *"  ok" ]] || failed=1
  else
    failed=1
  fi
done

printf '\n%-17s %12s %8s %6s %7s %7s %9s  %s\n' target runs seconds cov ft corpus returned result
printf '%s\n' "${rows[@]}"
exit $failed
