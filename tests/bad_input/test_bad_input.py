#!/usr/bin/env python3
"""The bad-input table: every bad input and fault a user may meet, each row
the command that meets it and the exact first error line and exit status it
must give (tests/bad_input/case.py says what a row holds; the rows are in
tests/bad_input/cases_*.py). Each row prints PASS or FAIL; the whole table,
with what each run gave, goes to BUILD/bad_input.md.

    python3 tests/bad_input/test_bad_input.py [BUILD_DIR] [--only PART]...
"""
import argparse
import glob
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bad_input"))
from case import Case  # noqa: E402


def load_cases():
    cases = []
    for path in sorted(glob.glob(str(ROOT / "tests" / "bad_input" / "cases_*.py"))):
        spec = importlib.util.spec_from_file_location(Path(path).stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for c in module.CASES:
            if not isinstance(c, Case):
                raise SystemExit(f"test_bad_input: {path}: a row that is not a Case: {c!r}")
            cases.append((Path(path).stem[len("cases_"):], c))
    names = [c.name for _, c in cases]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise SystemExit(f"test_bad_input: rows named twice: {', '.join(dup)}")
    return cases


def sh(cmd, cwd=ROOT, timeout=600, check=True):
    p = subprocess.run(cmd, shell=True, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"setup command failed ({p.returncode}): {cmd}\n{p.stderr[-2000:]}")
    return p


class Fixtures:
    """Data sets several rows read, made once per run (rows copy them before
    changing anything)."""

    def __init__(self, build, base):
        self.build, self.base, self.made = build, base, {}

    def get(self, name):
        if name not in self.made:
            out = self.base / name
            if name == "resnet_data":
                sh(f"TRAIN_COUNT=512 VAL_COUNT=128 SIDE=32 bash datasets/prepare_fmnist_classification.sh "
                   f"small {out} {self.build}")
            elif name == "ssd_data":
                sh(f"TRAIN_COUNT=64 VAL_COUNT=16 bash object_detection/prepare_data.sh small {out} {self.build}")
            elif name == "wmt_data":
                sh(f"TRAIN_PAIRS=400 EVAL_PAIRS=40 bash translation/prepare_data.sh small {out} {self.build}")
            elif name == "kill_at":
                out = out.with_suffix(".so")
                out.parent.mkdir(parents=True, exist_ok=True)
                sh(f"cc -shared -fPIC -O1 -Wall -o {out} tests/bad_input/kill_at.c")
            elif name == "ncf_data":
                sh(f"{self.build}/bin/movielens_generate --size=small --out={out}/raw && "
                   f"{self.build}/bin/movielens_convert --input={out}/raw/ratings.csv --out={out}/data")
                out = out / "data"
            else:
                raise KeyError(f"no fixture named {name}")
            self.made[name] = out
        return self.made[name]


class CaseDir:
    def __init__(self, path, build, fixtures):
        self.path, self.build, self.root, self._fixtures = path, build, ROOT, fixtures

    def write(self, name, content):
        p = self.path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)
        return p

    def run(self, cmd, check=True):
        return sh(cmd.format_map(Subs(self.subs(), self._fixtures)), cwd=self.path, check=check)

    def fixture(self, name):
        return self._fixtures.get(name)

    def subs(self):
        return {"build": self.build, "root": ROOT, "tmp": self.path}


class Subs(dict):
    """Format keys: the fixed ones, setup's, and fixtures on first use."""

    def __init__(self, base, fixtures):
        super().__init__(base)
        self.fixtures = fixtures

    def __missing__(self, key):
        value = self.fixtures.get(key)
        self[key] = value
        return value


def first_error(stderr):
    for line in stderr.splitlines():
        if line.startswith("error") or line.startswith("internal error"):
            return line
    return None


def run_case(c, build, fixtures, base):
    """(outcome, what it gave): outcome PASS, FAIL or SKIP."""
    missing = [p for p in c.needs if isinstance(p, str) and not shutil.which(p)]
    if missing:
        return "SKIP", f"needs {', '.join(missing)}"
    for probe in (p for p in c.needs if callable(p)):
        why = probe()
        if why:
            return "SKIP", why
    tmp = Path(tempfile.mkdtemp(prefix=c.name + "-", dir=base))
    t = CaseDir(tmp, build, fixtures)
    subs = Subs(t.subs(), fixtures)
    if c.setup:
        more = c.setup(t)
        if more:
            subs.update(more)
    cmd = c.cmd.format_map(subs)
    want = c.error
    if isinstance(want, str):
        want = want.format_map(subs)
    proc = subprocess.Popen(cmd, shell=True, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, errors="replace", start_new_session=True)
    try:
        out, err = proc.communicate(timeout=c.timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return "FAIL", f"still running after {c.timeout_s:.0f} s (a hang)"
    rc = proc.returncode
    got = first_error(err)
    result = subprocess.CompletedProcess(cmd, rc, out, err)
    gave = f"status {rc}" + (f", {got}" if got else "")
    if rc < 0 or rc >= 128:
        sig = -rc if rc < 0 else rc - 128
        return "FAIL", f"died of signal {sig}; stderr ends: {err[-300:]!r}"
    problems = []
    if rc != c.status:
        problems.append(f"exit status {rc}, want {c.status}")
    if want is None:
        if got:
            problems.append(f"an error where none belongs: {got}")
    elif isinstance(want, re.Pattern):
        if not got or not want.fullmatch(got):
            problems.append(f"first error line {got!r}, want one matching {want.pattern!r}")
    elif got != want:
        problems.append(f"first error line {got!r}, want {want!r}")
    if got and got.startswith("internal error"):
        problems.append("an internal error (a bug), not a message about the input")
    if c.check and not problems:
        why = c.check(t, result)
        if why:
            problems.append(why)
    if problems:
        return "FAIL", "; ".join(problems) + (f"; stderr ends: {err[-400:]!r}" if err else "")
    shutil.rmtree(tmp, ignore_errors=True)
    return "PASS", gave


def md(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build", nargs="?", default="build")
    ap.add_argument("--only", action="append", default=[], help="rows whose name contains this")
    args = ap.parse_args()
    build = (ROOT / args.build).resolve()
    if not (build / "bin").is_dir():
        print(f"test_bad_input: {build}/bin missing; run make first", file=sys.stderr)
        return 2
    cases = [(a, c) for a, c in load_cases() if not args.only or any(p in c.name for p in args.only)]
    base = Path(tempfile.mkdtemp(prefix="bad-input-"))
    fixtures = Fixtures(build, base / "fixtures")
    rows, failed = [], 0
    try:
        for area, c in cases:
            try:
                outcome, gave = run_case(c, build, fixtures, base)
            except Exception as e:  # a broken setup is a failed row, not a crash of the table
                outcome, gave = "FAIL", f"setup: {e}"
            failed += outcome == "FAIL"
            print(f"{outcome} {c.name}" + ("" if outcome == "PASS" else f": {gave}"), flush=True)
            rows.append((area, c, outcome, gave))
    finally:
        shutil.rmtree(base, ignore_errors=True)
    lines = ["# The bad-input table", "",
             f"{len(rows)} rows, {failed} failed (tests/bad_input/test_bad_input.py; rows in tests/bad_input/).", "",
             "| area | row | what | expected first error line | status | outcome |",
             "|---|---|---|---|---:|---|"]
    for area, c, outcome, gave in rows:
        expected = (c.error.pattern if isinstance(c.error, re.Pattern) else c.error
                    if c.error is not None else "(none: accepted)")
        lines.append(f"| {area} | {c.name} | {md(c.doc)} | `{md(expected)}` | {c.status} | {outcome} |")
    (build / "bad_input.md").write_text("\n".join(lines) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
