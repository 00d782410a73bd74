#!/usr/bin/env bash
# The error table (tests/ops/error_table.py over the rows test_check_error writes
# when TEST_ERROR_TABLE is set): the CPU op tests' golden comparisons land in
# it with their measured errors; a row over its tolerance is flagged and
# fails the script; a malformed file is refused.
# Usage: tests/ops/test_error_table.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
scratch_dir

TEST_ERROR_TABLE=$tmp/rows.tsv "$build/tests/test_ops_conv" >"$tmp/conv.out" 2>&1
python3 tests/ops/error_table.py "$tmp/rows.tsv" --out "$tmp/table.md" >"$tmp/print.out" 2>&1
rc=$?
check error_table_clean_run [ $rc = 0 ]
# conv3x3's output against PyTorch: a row with a number under its tolerance.
check error_table_has_golden_rows grep -Eq '^\| test_ops_conv \| conv_matches_pytorch_per_image \| conv3x3.y \| fp32, CPU vs PyTorch \| [0-9.e+-]+ \| 1e-05 \| (exact|[0-9.]+x) \|$' "$tmp/table.md"
rows=$(wc -l <"$tmp/rows.tsv")
check error_table_counts_every_row grep -q "^$rows comparisons in all, 0 over tolerance.$" "$tmp/table.md"
# oneDNN against the plain path: a section of its own (where oneDNN is built in).
if grep -q "oneDNN vs im2col" "$tmp/rows.tsv"; then
  check error_table_has_library_rows grep -Eq '^\| test_ops_conv \| conv_library_matches_plain \| shape 1 dw \| fp32, oneDNN vs im2col \| [0-9.e+-]+ \| 1e-05 \| (exact|[0-9.]+x) \|$' \
    <(sed -n '/^## CPU: oneDNN against/,$p' "$tmp/table.md")
fi

printf 'test_x\tcase_y\tthing\tbf16\t0.5\t0.01\n' >>"$tmp/rows.tsv"
python3 tests/ops/error_table.py "$tmp/rows.tsv" >"$tmp/over.md" 2>&1
rc=$?
check error_table_flags_over_tolerance [ $rc = 1 ]
check error_table_marks_the_row grep -q '| test_x | case_y | thing | bf16 | 0.5 \*\*over\*\* | 0.01 | 0.0x |' "$tmp/over.md"

# A NaN error is over every tolerance.
head -n 1 "$tmp/rows.tsv" >"$tmp/nan.tsv"
printf 'test_x\tcase_n\tthing\tfp32\tnan\t1\n' >>"$tmp/nan.tsv"
python3 tests/ops/error_table.py "$tmp/nan.tsv" >"$tmp/nan.md" 2>&1
rc=$?
check error_table_flags_nan [ $rc = 1 ]
check error_table_marks_the_nan_row grep -q '| test_x | case_n | thing | fp32 | nan \*\*over\*\* | 1 |' "$tmp/nan.md"

printf 'only\tthree\tfields\n' >"$tmp/bad.tsv"
python3 tests/ops/error_table.py "$tmp/bad.tsv" >"$tmp/bad.out" 2>&1
rc=$?
check error_table_refuses_malformed [ $rc = 2 ]
check error_table_names_the_line grep -q 'bad.tsv:1: want 6 tab-separated fields, got 3' "$tmp/bad.out"
