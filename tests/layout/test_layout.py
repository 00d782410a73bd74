#!/usr/bin/env python3
"""The layout's rules (README.md, "Layout"; common/README.md), checked on the tree:

- includes in common/ run one way: core <- device <- ops, data <- train <- models
  (a folder includes its own headers and those of folders below it; ops and
  data, side by side, never include each other), and never a task folder;
- a task folder never includes another task folder;
- nothing in common/ names a data set or a benchmark;
- a header (.h) of the code (common/, the task folders, datasets/) declares,
  and defines no function longer than a short inline one
  (MAX_HEADER_BODY_LINES lines of body): what several files share is defined
  once in a .c file.

Each rule is also run on a small made-up tree that breaks it, so that a
checker that finds nothing cannot pass.

    python3 tests/layout/test_layout.py [BUILD_DIR]   (BUILD_DIR is not used)
"""
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# The folders of common/ and their level: a folder may include a folder of a
# lower level, or itself. Equal levels are siblings that do not meet.
LEVELS = {"core": 0, "device": 1, "ops": 2, "data": 2, "train": 3, "models": 4}
TASKS = ["image_classification", "object_detection", "translation", "recommendation", "language"]
# Data sets and benchmarks that common/ must not name (the models it shares,
# ResNet and the transformer encoder, are not benchmarks' names here).
NAMES = re.compile(r"imagenet|movielens|ml-20m|\bcoco\b|\bwmt|squad|fashion|fmnist|\bncf\b|\bssd\b|"
                   r"\bbert\b|image_classification|object_detection|recommendation|"
                   r"\btranslation/|\blanguage/", re.I)
SOURCES = (".c", ".h", ".cu", ".cuh", ".cpp")
CODE_FOLDERS = ["common", "datasets"] + TASKS
MAX_HEADER_BODY_LINES = 25
# A function definition's first line: a return type and a name at column 0,
# its parameters, and the brace on this or one of the next lines.
DEFINITION = re.compile(r"^(?!typedef|struct|enum|union|extern|#)[A-Za-z_][\w \t*]*[ \t*]\w+\(")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def sources(root, folder):
    for dirpath, _, names in sorted(os.walk(os.path.join(root, folder))):
        for name in sorted(names):
            if name.endswith(SOURCES):
                yield os.path.join(dirpath, name)


def resolve(root, path, name):
    """The file a quoted #include names: beside the includer, then under
    common/ (-Icommon), then from the top (-I.)."""
    for base in (os.path.dirname(path), os.path.join(root, "common"), root):
        candidate = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(candidate):
            return os.path.relpath(candidate, root)
    return None


def include_problems(root):
    problems = []
    for path in sources(root, "common"):
        rel = os.path.relpath(path, root)
        parts = rel.split(os.sep)
        if len(parts) < 3 or parts[1] not in LEVELS:
            problems.append(f"{rel}: not in one of the folders of common/ ({', '.join(LEVELS)})")
            continue
        mine = parts[1]
        for name in INCLUDE.findall(open(path, encoding="utf-8").read()):
            target = resolve(root, path, name)
            if target is None:
                problems.append(f'{rel}: #include "{name}" is not a file of the tree')
                continue
            tparts = target.split(os.sep)
            if tparts[0] != "common" or len(tparts) < 3:
                problems.append(f'{rel}: #include "{name}" reaches {target}, outside common/')
                continue
            theirs = tparts[1]
            if theirs != mine and LEVELS.get(theirs, 99) >= LEVELS[mine]:
                problems.append(f'{rel}: #include "{name}": common/{mine} may not include '
                                f"common/{theirs} (includes run core <- device <- ops, data <- "
                                f"train <- models)")
    for task in TASKS:
        for path in sources(root, task):
            rel = os.path.relpath(path, root)
            for name in INCLUDE.findall(open(path, encoding="utf-8").read()):
                target = resolve(root, path, name) or name
                top = target.split(os.sep)[0]
                if top in TASKS and top != task:
                    problems.append(f'{rel}: #include "{name}": a task folder includes another ({top})')
    return problems


def naming_problems(root):
    problems = []
    for dirpath, _, names in sorted(os.walk(os.path.join(root, "common"))):
        for name in sorted(names):
            path = os.path.join(dirpath, name)
            for number, line in enumerate(open(path, encoding="utf-8"), 1):
                m = NAMES.search(line)
                if m:
                    problems.append(f"{os.path.relpath(path, root)}:{number}: names "
                                    f"'{m.group(0)}': common/ names no data set or benchmark")
    return problems


def header_body_problems(root):
    problems = []
    for folder in CODE_FOLDERS:
        for dirpath, _, names in sorted(os.walk(os.path.join(root, folder))):
            for name in sorted(n for n in names if n.endswith(".h")):
                path = os.path.join(dirpath, name)
                lines = [re.sub(r"\s*//.*$", "", l) for l in open(path, encoding="utf-8").read().split("\n")]
                i = 0
                while i < len(lines):
                    if not DEFINITION.match(lines[i]):
                        i += 1
                        continue
                    j = i  # the signature's last line: the brace, or the ';' of a declaration
                    while j < len(lines) - 1 and j < i + 8 and not lines[j].rstrip().endswith(("{", ";")):
                        j += 1
                    if not lines[j].rstrip().endswith("{"):
                        i = j + 1
                        continue
                    k = j + 1
                    while k < len(lines) and lines[k] != "}":
                        k += 1
                    if k - j - 1 > MAX_HEADER_BODY_LINES:
                        problems.append(f"{os.path.relpath(path, root)}:{i + 1}: a function of {k - j - 1} "
                                        f"lines in a header (at most {MAX_HEADER_BODY_LINES}): define it "
                                        f"in a .c file")
                    i = k + 1
    return problems


def report(case, problems, want_some=False):
    ok = bool(problems) if want_some else not problems
    if ok:
        print(f"PASS {case}")
    else:
        detail = "; ".join(problems[:5]) if problems else "the broken tree was not caught"
        print(f"FAIL {case}: {detail}")
    return ok


def broken_tree(files):
    tmp = tempfile.TemporaryDirectory()
    for rel, text in files.items():
        path = os.path.join(tmp.name, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return tmp


def main():
    ok = report("includes_run_one_way", include_problems(ROOT))
    ok &= report("common_names_no_data_set_or_benchmark", naming_problems(ROOT))
    ok &= report("headers_define_only_short_functions", header_body_problems(ROOT))
    # The same checks on trees that break each rule once.
    upward = {"common/core/check.h": '#include "device/device.h"\n', "common/device/device.h": ""}
    sideways = {"common/ops/ops.h": '#include "data/loader.h"\n', "common/data/loader.h": ""}
    to_task = {"common/train/run.h": '#include "recommendation/movielens.h"\n',
               "recommendation/movielens.h": ""}
    across = {"image_classification/train.c": '#include "recommendation/ncf_data.h"\n',
              "recommendation/ncf_data.h": ""}
    named = {"common/data/loader.h": "// reads ImageNet\n"}
    long_body = "static inline int ml_sum(const int *v,\n                         int n) {\n" + \
        "  int s = 0;\n" * (MAX_HEADER_BODY_LINES + 1) + "}\n"
    in_header = {"recommendation/movielens.h": "int ml_count(void);  // declared\n" + long_body}
    for case, files, check in [("upward_include_is_caught", upward, include_problems),
                               ("ops_data_include_is_caught", sideways, include_problems),
                               ("task_include_in_common_is_caught", to_task, include_problems),
                               ("task_to_task_include_is_caught", across, include_problems),
                               ("data_set_name_in_common_is_caught", named, naming_problems),
                               ("long_function_in_header_is_caught", in_header, header_body_problems)]:
        with broken_tree(files) as tmp:
            ok &= report(case, check(tmp), want_some=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
