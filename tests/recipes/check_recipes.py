#!/usr/bin/env python3
"""The recipe tables against the trainers' effective configs.

  python3 tests/recipes/check_recipes.py [--build BUILD_DIR] [--root DIR] [RECIPE_DIR]
  python3 tests/recipes/check_recipes.py --list     every full config: "BENCH FILE" lines

RECIPE_DIR (default: this folder) holds one table per benchmark,
<bench>.recipe, of lines

  config|key|value|source

config: a config file under the benchmark's task folder's configs/ (in the
repository, or under --root), or * for every full config of that task
(FULL_CONFIGS); key: a trainer config key; value: the MLPerf reference's
value, as the trainer's effective config prints it; source: where the value
comes from (the reference's file and line, or the rule's section). Blank
lines and lines starting with # are skipped. A row naming one config file
wins over a * row of the same key; a second row of the same config and key
is an error.

For each config a row names, the trainer (BUILD_DIR/bin/<bench>) prints its
effective config, defaults included, with --print_config (no data, device
or log touched), and each row is compared with it: as numbers when both
parse as numbers (relative tolerance 1e-9), item by item for lists such as
"40,50" or "2;2,3", as text otherwise. Each mismatch, key the trainer lacks,
config file that does not exist or trainer that fails is one line naming the
table's line, the benchmark, the config, the key, the reference's value, ours
and the source.

Exit status: 0 when every row matches, 1 on any of those, 2 when a table
cannot be read (a malformed line, a second row for a key, a file named
after no benchmark, no tables)."""
import argparse
import glob
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.dirname(os.path.abspath(__file__))

# The full configs of a task, what a * row stands for: the full-scale runs
# (full.conf, full_1gpu.conf, full_8gpu.conf, ...) and the configs named
# after whose recipe they follow on the full data set (ml20m_reference.conf,
# ml20m_nvidia.conf). Scaled configs (small, medium) and configs of
# generated data (generated_full.conf) are not full.
FULL_CONFIGS = ("full*.conf", "*_reference.conf", "*_nvidia.conf")
RELATIVE_TOLERANCE = 1e-9


class TableError(Exception):
    """A table that cannot be read: its text names the file (and line)."""


def bench_dirs():
    """{benchmark: task folder}, from the Makefile's BENCH_DIR_<bench> lines
    (the one map of them)."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        return dict(re.findall(r"(?m)^BENCH_DIR_(\w+)\s*:=\s*(\S+)", f.read()))


def full_configs(configs):
    """The full configs' file names in a configs/ folder."""
    names = set()
    for pattern in FULL_CONFIGS:
        names.update(os.path.basename(p) for p in glob.glob(os.path.join(configs, pattern)))
    return sorted(names)


def read_table(path):
    """[(line number, config, key, value, source)] of a .recipe file."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if not text or text.startswith("#"):
                continue
            fields = [field.strip() for field in text.split("|", 3)]
            if len(fields) != 4 or not all(fields[i] for i in (0, 1, 3)):
                raise TableError("%s:%d: expected 'config|key|value|source' (config, key and "
                                 "source not empty), got '%s'" % (path, lineno, text[:200]))
            rows.append((lineno,) + tuple(fields))
    return rows


def effective_config(trainer, conf):
    """({key: value} the trainer prints for the config file, None), or
    (None, why) when it cannot print one."""
    if not os.access(trainer, os.X_OK):
        return None, "%s is not built (make)" % os.path.relpath(trainer, ROOT)
    proc = subprocess.run([trainer, "--config=" + conf, "--print_config"], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        said = (proc.stderr + proc.stdout).splitlines()
        errors = [l for l in said if l.startswith("error")]
        return None, "%s --print_config failed (status %d): %s" % (
            os.path.basename(trainer), proc.returncode, (errors or said or ["no output"])[0])
    values = {}
    for line in proc.stdout.splitlines():
        # config_print's line: "config: key = value  # origin"
        m = re.match(r"config: (\S+) = (.*)  # [^#]*$", line)
        if m:
            values[m.group(1)] = m.group(2)
    return values, None


def as_number(text):
    try:
        return float(text)
    except ValueError:
        return None


def same_value(reference, ours):
    """Whether two printed values agree: item by item (lists separated by
    , ; or :), numbers within the relative tolerance, other items as text."""
    split = lambda s: re.split(r"\s*([,;:])\s*", s.strip())
    a, b = split(reference), split(ours)
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        nx, ny = as_number(x), as_number(y)
        if nx is not None and ny is not None:
            # Written so that a NaN fails and equal infinities pass.
            if not (nx == ny or abs(nx - ny) <= RELATIVE_TOLERANCE * max(abs(nx), abs(ny))):
                return False
        elif x != y:
            return False
    return True


def expand(configs, path, rows):
    """{config file: {key: row}}: * rows for every full config, a row naming
    a config over a * row of its key. A config file that does not exist is
    kept (the check reports it)."""
    wanted = {}
    for star in (True, False):
        for row in rows:
            lineno, config, key = row[:3]
            if (config == "*") != star:
                continue
            for name in full_configs(configs) if star else [config]:
                first = wanted.get(name, {}).get(key)
                if first and first[1] == config:
                    raise TableError("%s:%d: %s|%s: a second row for it (the first at line %d)"
                                     % (path, lineno, config, key, first[0]))
                wanted.setdefault(name, {})[key] = row
    return wanted


def check_table(bench, root, task, path, build):
    """(rows checked, [complaint lines]) of one table."""
    configs = os.path.join(root, task, "configs")
    wanted = expand(configs, path, read_table(path))
    trainer = os.path.join(build, "bin", bench)
    if not os.path.isabs(trainer):
        trainer = os.path.join(ROOT, trainer)
    checked, complaints = 0, []
    for name in sorted(wanted):
        rows = sorted(wanted[name].values())
        where = lambda row: "%s:%d: %s %s" % (path, row[0], bench, name)
        conf = os.path.join(configs, name)
        if not os.path.isfile(conf):
            complaints += ["%s: no config %s/configs/%s" % (where(row), task, name) for row in rows]
            continue
        values, why = effective_config(trainer, conf)
        if values is None:
            complaints.append("%s: %s" % (where(rows[0]), why))
            continue
        for row in rows:
            lineno, _, key, value, source = row
            checked += 1
            if key not in values:
                complaints.append("%s: %s: the trainer has no such key (reference %s; source: %s)"
                                  % (where(row), key, value, source))
            elif not same_value(value, values[key]):
                complaints.append("%s: %s: reference %s, ours %s (source: %s)"
                                  % (where(row), key, value, values[key], source))
    return checked, complaints


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", nargs="?", default=HERE, help="the folder of <bench>.recipe tables")
    ap.add_argument("--build", default="build", help="the build folder of the trainers")
    ap.add_argument("--root", default=ROOT,
                    help="the folder that holds the task folders' configs/ (default: the repository)")
    ap.add_argument("--list", action="store_true", help="print every full config and exit")
    args = ap.parse_args()
    benches = bench_dirs()
    if args.list:
        for bench, task in benches.items():
            for name in full_configs(os.path.join(args.root, task, "configs")):
                print(bench, os.path.join(task, "configs", name))
        return 0
    status = 0
    try:
        tables = sorted(glob.glob(os.path.join(args.folder, "*.recipe")))
        if not tables:
            raise TableError("%s: no <bench>.recipe tables" % args.folder)
        for path in tables:
            if os.path.basename(path)[:-len(".recipe")] not in benches:
                raise TableError("%s: not named after a benchmark (%s)" % (path, ", ".join(benches)))
        for path in tables:
            bench = os.path.basename(path)[:-len(".recipe")]
            checked, complaints = check_table(bench, args.root, benches[bench], path, args.build)
            for line in complaints:
                print(line)
            print("%s: %d rows checked, %d problems" % (path, checked, len(complaints)))
            status = status or (1 if complaints else 0)
    except (TableError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
