"""The recipe tables (tests/recipes/<bench>.recipe) against the trainers'
effective configs, and the checker itself (check_recipes.py) on tables of
its own: a matching row, a wrong value, a key the trainer lacks, a config
that does not exist and a malformed line each give their one line; and the
trainers' --print_config, which the checker reads.
Usage: python3 tests/recipes/test_recipes.py BUILD_DIR"""
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "logs"))
from mllog_fixture import case, failures  # noqa: E402

build = sys.argv[1] if len(sys.argv) > 1 else "build"
CHECKER = os.path.join(HERE, "check_recipes.py")
RESNET = os.path.join(build, "bin", "resnet")


def run(cmd):
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    return proc.returncode, proc.stdout, proc.stderr


def check(folder, root=None):
    return run([sys.executable, CHECKER, "--build", build] + (["--root", root] if root else []) + [folder])


def first_line(out):
    return (out.splitlines() or [""])[0]


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    return path


def table(folder, bench, text):
    write(os.path.join(folder, bench + ".recipe"), text)
    return folder


if not os.access(os.path.join(ROOT, RESNET), os.X_OK):
    print("FAIL recipes: %s is not built" % RESNET)
    sys.exit(1)

with tempfile.TemporaryDirectory() as tmp:
    # Config files of the checker's own (--root), so that the cases do not
    # follow the project's configs: full_a and full_b are full configs, as
    # are NCF's full, *_reference and *_nvidia; small and generated_full not.
    root = os.path.join(tmp, "root")
    resnet_configs = os.path.join(root, "image_classification", "configs")
    conf_a = write(os.path.join(resnet_configs, "full_a.conf"), "optimizer = lars\nbase_lr = 10.5\n"
                   "batch_size = 3264\nstages = 3,4,6,3\n")
    write(os.path.join(resnet_configs, "full_b.conf"), "optimizer = lars\nbase_lr = 3.7\nbatch_size = 408\n")
    write(os.path.join(resnet_configs, "small.conf"), "optimizer = sgd\nbase_lr = 0.1\n")
    for name in ("full.conf", "ml20m_reference.conf", "ml20m_nvidia.conf", "generated_full.conf", "small.conf"):
        write(os.path.join(root, "recommendation", "configs", name), "mf_dim = 64\n")

    # --print_config: the files and flags as a run takes them, defaults
    # included, on stdout only; no log written, no data needed.
    log = os.path.join(tmp, "never.log")
    rc, out, err = run([RESNET, "--config=" + conf_a, "--print_config", "--batch_size=7", "--log_file=" + log])
    lines = out.splitlines()
    case("print_config_effective_values",
         rc == 0 and "config: batch_size = 7  # flag" in lines
         and "config: base_lr = 10.5  # %s" % conf_a in lines
         and "config: seed = 1  # default" in lines and all(l.startswith("config: ") for l in lines)
         and not os.path.exists(log), out + err)
    rc, out, err = run([RESNET, "--print_config", "--no_such_key=1"])
    case("print_config_bad_flag_still_an_error",
         rc == 2 and err.startswith("error: --no_such_key: unknown key") and not out, out + err)

    good = table(os.path.join(tmp, "good"), "resnet", "# a comment line\n\n"
                 "*|optimizer|lars|the reference's optimizer\n"
                 "*|end_lr|1e-4|numbers compared as numbers (a default)\n"
                 "full_a.conf|base_lr|10.5|one config's row\n"
                 "full_a.conf|stages|3, 4,6,3|a list, item by item\n")
    table(good, "ncf", "*|mf_dim|64|every full config: full, ml20m_nvidia, ml20m_reference\n")
    rc, out, err = check(good, root)
    case("matching_rows_pass", rc == 0 and "resnet.recipe: 6 rows checked, 0 problems" in out
         and "ncf.recipe: 3 rows checked, 0 problems" in out, out + err)

    wrong = table(os.path.join(tmp, "wrong"), "resnet", "full_a.conf|base_lr|10.500001|lars.py:12\n")
    rc, out, err = check(wrong, root)
    case("wrong_value_fails", rc == 1 and first_line(out) ==
         "%s/resnet.recipe:1: resnet full_a.conf: base_lr: reference 10.500001, ours 10.5 "
         "(source: lars.py:12)" % wrong, out + err)
    # A * row stands for each full config; one naming a config wins over it.
    star = table(os.path.join(tmp, "star"), "resnet", "*|base_lr|10.5|src\nfull_b.conf|base_lr|3.7|src\n"
                 "*|batch_size|3264|src\n")
    rc, out, err = check(star, root)
    case("star_row_for_every_full_config", rc == 1 and out.splitlines() == [
        "%s/resnet.recipe:3: resnet full_b.conf: batch_size: reference 3264, ours 408 (source: src)" % star,
        "%s/resnet.recipe: 4 rows checked, 1 problems" % star], out + err)
    unknown = table(os.path.join(tmp, "unknown"), "resnet", "full_a.conf|crop_area_max|1.0|src\n")
    rc, out, err = check(unknown, root)
    case("unknown_key_fails", rc == 1 and first_line(out) ==
         "%s/resnet.recipe:1: resnet full_a.conf: crop_area_max: the trainer has no such key "
         "(reference 1.0; source: src)" % unknown, out + err)
    noconf = table(os.path.join(tmp, "noconf"), "resnet", "full_16gpu.conf|base_lr|10.5|src\n")
    rc, out, err = check(noconf, root)
    case("unknown_config_fails", rc == 1 and first_line(out) ==
         "%s/resnet.recipe:1: resnet full_16gpu.conf: no config image_classification/configs/full_16gpu.conf"
         % noconf, out + err)
    bad = table(os.path.join(tmp, "malformed"), "resnet", "*|optimizer|lars|src\n*|base_lr|10.5\n")
    rc, out, err = check(bad, root)
    case("malformed_line_fails", rc == 2 and err.strip() ==
         "error: %s/resnet.recipe:2: expected 'config|key|value|source' (config, key and source not "
         "empty), got '*|base_lr|10.5'" % bad, out + err)
    twice = table(os.path.join(tmp, "twice"), "resnet", "*|base_lr|10.5|src\n*|base_lr|10.5|src\n")
    rc, out, err = check(twice, root)
    case("second_row_for_a_key_fails", rc == 2 and "resnet.recipe:2: *|base_lr: a second row for it "
         "(the first at line 1)" in err, out + err)
    table(os.path.join(tmp, "misnamed"), "resnet50", "*|base_lr|10.5|src\n")
    rc, out, err = check(os.path.join(tmp, "misnamed"), root)
    case("table_named_after_no_benchmark", rc == 2 and "resnet50.recipe: not named after a benchmark" in err,
         out + err)

# The project's own tables, whichever exist.
tables = sorted(glob.glob(os.path.join(HERE, "*.recipe")))
if not tables:
    print("SKIP recipe_tables: no tests/recipes/<bench>.recipe yet")
else:
    rc, out, err = check(HERE)
    for path in tables:
        name = os.path.basename(path)
        row = re.compile(re.escape(os.path.join(HERE, name)) + r":\d+: ")
        said = [l for l in out.splitlines() if row.match(l)]
        case("recipe_" + name[:-len(".recipe")], rc in (0, 1) and not said,
             "\n    ".join(said) or err.strip() or out.strip())
sys.exit(1 if failures() else 0)
