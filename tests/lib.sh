# tests/lib.sh: the shell helpers the test scripts share; `source` it.

# check NAME CONDITION...: "PASS NAME" when the condition holds, else
# "FAIL NAME: CONDITION".
check() {
  local name=$1
  shift
  if "$@"; then echo "PASS $name"; else echo "FAIL $name: $*"; fi
}

# close A B TOL: both numbers given and |A - B| < TOL (an empty one fails).
close() { [[ -n $1 && -n $2 ]] && python3 -c "import sys; sys.exit(not abs($1 - $2) < $3)"; }

# ncf_hr OUTPUT EPOCH: the HR@10 the NCF trainer printed for an epoch.
ncf_hr() { grep -m1 "^ncf: epoch $2:" "$1" | sed 's/.*HR@10 \([0-9.]*\).*/\1/'; }
