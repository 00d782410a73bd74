"""cases.py: the Python test scripts' side of test.h: one case, one line,
"PASS name" or "FAIL name: what" (tests/run_tests.sh adds them up).

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))
    from cases import run_case
"""


def run_case(name, check, *args):
    """Runs check(*args), which returns None when the case passes and what
    went wrong when it fails; an exception (a crash of either side of a
    comparison) is the case's failure too. Prints the case's line and
    returns whether it passed."""
    try:
        why = check(*args)
    except Exception as e:
        why = f"{type(e).__name__}: {e}"
    print(f"FAIL {name}: {why}" if why else f"PASS {name}", flush=True)
    return why is None
