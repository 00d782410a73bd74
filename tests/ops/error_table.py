#!/usr/bin/env python3
"""The measured errors of the op and model tests as one table.

Every comparison of a GPU result with the CPU reference, of a CPU op with
PyTorch's golden values, and of the CPU's oneDNN convolutions with its plain
im2col path goes through test_check_error (tests/harness/test.h), which
appends a row to the file named by TEST_ERROR_TABLE. This script turns those
rows into a markdown table per kind of comparison: program, case, quantity,
dtype, relative L2 error, tolerance and the margin (tolerance / error).

    TEST_ERROR_TABLE=errors.tsv bash tests/run_tests.sh build
    python3 tests/ops/error_table.py errors.tsv [--out errors.md]

Exit status 1 when a row is over its tolerance (the test run has failed
then too), 2 on a malformed file.
"""
import argparse
import sys

GOLDEN = "CPU vs PyTorch"  # the dtype column of golden-file rows says this
LIBRARY = "oneDNN vs im2col"  # and that of the CPU library against the plain path


def read_rows(path):
    rows = []
    with open(path) as f:
        for lineno, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != 6:
                print(f"error_table: {path}:{lineno}: want 6 tab-separated fields, got {len(fields)}",
                      file=sys.stderr)
                sys.exit(2)
            program, case, what, dtype, err, tol = fields
            try:
                rows.append(dict(program=program, case=case, what=what, dtype=dtype,
                                 err=float(err), tol=float(tol)))
            except ValueError:
                print(f"error_table: {path}:{lineno}: error or tolerance is not a number", file=sys.stderr)
                sys.exit(2)
    return rows


def margin(r):
    if r["err"] == 0:
        return "exact"
    return f"{r['tol'] / r['err']:.1f}x"


def over_tolerance(r):
    # "not <=" so that a NaN error (or tolerance) counts as over: a NaN fails
    # every comparison.
    return not r["err"] <= r["tol"]


def section(title, rows):
    if not rows:
        return [f"## {title}", "", "No rows (nothing of this kind ran here).", ""]
    over = [r for r in rows if over_tolerance(r)]
    lines = [f"## {title}", "",
             f"{len(rows)} comparisons, {len(over)} over tolerance.", "",
             "| program | case | quantity | dtype | relative error | tolerance | margin |",
             "|---|---|---|---|---:|---:|---:|"]
    for r in rows:
        flag = " **over**" if over_tolerance(r) else ""
        lines.append(f"| {r['program']} | {r['case']} | {r['what']} | {r['dtype']} | "
                     f"{r['err']:.3g}{flag} | {r['tol']:.3g} | {margin(r)} |")
    return lines + [""]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tsv")
    p.add_argument("--out", help="also write the table here")
    args = p.parse_args()
    rows = read_rows(args.tsv)
    golden = [r for r in rows if GOLDEN in r["dtype"]]
    library = [r for r in rows if LIBRARY in r["dtype"]]
    gpu = [r for r in rows if GOLDEN not in r["dtype"] and LIBRARY not in r["dtype"]]
    over = sum(over_tolerance(r) for r in rows)
    text = "\n".join(["# Measured errors of the op and model tests", "",
                      f"{len(rows)} comparisons in all, {over} over tolerance.", ""]
                     + section("GPU against the CPU reference", gpu)
                     + section("CPU against PyTorch (golden files)", golden)
                     + section("CPU: oneDNN against the plain im2col path", library))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 1 if any(over_tolerance(r) for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
