"""One row of the bad-input table (tests/bad_input/test_bad_input.py runs them all).

A row is a bad input or a fault as a user meets it, the command that meets
it, and what must come of it: the exact first error line and the exit
status, or (error=None) a run that succeeds, optionally with a check of
what it wrote. The table lives in tests/bad_input/cases_*.py, one file per
area, each defining CASES = [Case(...), ...].

    Case("resnet_eval_every_zero",
         doc="--eval_every=0 (once a division by zero)",
         cmd="{build}/bin/resnet --config={root}/image_classification/configs/small.conf "
             "--data_dir={resnet_data} --device=cpu --eval_every=0",
         error="error: --eval_every: 0 is outside [1, inf)", status=2)

cmd is a shell command, formatted with {build} (the build directory),
{root} (the repository), {tmp} (a fresh directory of this case), every
fixture by name ({resnet_data}, {ncf_data}: shared data sets made once per
run; copy one into {tmp} before changing it) and whatever setup returns.
setup(t) prepares {tmp}: t.path (a pathlib.Path), t.write(name, text or
bytes) -> Path, t.run(shell command, check=True) (fixtures substituted; with
check it must succeed), t.fixture(name) -> Path,
t.build and t.root; it may return a dict of more substitutions.
error is compared with the first line of stderr that starts with "error" or
"internal error", after the same substitutions; where a part cannot be known
in advance (which record of a shuffled epoch a worker met first) error may
be a compiled regular expression the whole line must match. An internal
error (a broken invariant) never passes. check(t, proc) may return a
string saying what is wrong with a run (proc: subprocess.CompletedProcess
with text stdout and stderr), or None.
needs names programs that must be on PATH (mpirun), or holds functions
that return why the machine cannot run the case (or None): either way the
case then reports SKIP.
A case also fails when the command dies by a signal, reports an internal
error where a bad input was expected, or runs past timeout_s.
printed, warned and left_nothing below make the usual checks.
"""
from dataclasses import dataclass
from typing import Callable, Optional, Pattern, Union


@dataclass
class Case:
    name: str
    cmd: str
    error: Optional[Union[str, Pattern]]
    status: int
    doc: str = ""
    setup: Optional[Callable] = None
    check: Optional[Callable] = None
    timeout_s: float = 120.0
    needs: tuple = ()


def printed(text):
    """A check: text is on the run's stdout."""
    return lambda t, proc: None if text in proc.stdout else f"no '{text}' on stdout: {proc.stdout[-400:]!r}"


def warned(line):
    """A check: line ({tmp} substituted) is on the run's stderr."""
    return lambda t, proc: (None if line.format(tmp=t.path) in proc.stderr
                            else f"no '{line}' on stderr: {proc.stderr[-400:]!r}")


def left_nothing(*paths):
    """A check: a failed run left none of paths (under {tmp})."""
    def check(t, proc):
        left = [p for p in paths if (t.path / p).exists()]
        return f"a failed run left {left}" if left else None
    return check
