#!/usr/bin/env bash
# Multi-rank tests. Runs BUILD/tests/test_dist under mpirun with two CPU ranks
# and passes its case lines on; then makes rank 1 fail while rank 0 waits in
# a barrier, and checks that mpirun ends the whole job with the rank's message
# well before the timeout, instead of hanging.
# Usage: tests/train/test_dist.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
bin=$build/tests/test_dist
if ! command -v mpirun >/dev/null; then
  echo "SKIP test_dist_mpi: mpirun not found (Open MPI is not installed)"
  exit 0
fi
if [[ ! -x $bin ]]; then
  echo "FAIL test_dist_mpi: $bin is not built"
  exit 1
fi
if ! ldd "$bin" | grep libmpi >/dev/null; then
  echo "SKIP test_dist_mpi: $bin was built without MPI (MPI=0)"
  exit 0
fi
mpi=(mpirun --allow-run-as-root --oversubscribe -np 2)
failed=0

out=$(timeout 120 "${mpi[@]}" "$bin" 2>&1)
rc=$?
grep -E '^(PASS|FAIL|SKIP) ' <<<"$out"
# Six cases; the two GPU ones skip without a GPU per rank.
passes=$(grep -c -E '^(PASS|SKIP) ' <<<"$out")
if ((rc != 0)) || ((passes != 6)); then
  echo "FAIL test_dist_mpi: mpirun exited with status $rc, $passes of 6 cases passed or skipped; last output:"
  tail -n 8 <<<"$out" | sed 's/^/    /'
  failed=1
fi

limit=60
start=$(date +%s)
out=$(timeout $limit "${mpi[@]}" "$bin" --fail-rank=1 2>&1)
rc=$?
took=$(($(date +%s) - start))
want="error: test_dist: deliberate failure of rank 1 [rank 1]"
if ((rc == 124)); then
  echo "FAIL rank_failure_ends_job: the job hung; killed by timeout after ${limit}s"
  failed=1
elif ((rc == 0)); then
  echo "FAIL rank_failure_ends_job: mpirun exited 0 though rank 1 failed"
  failed=1
elif ! grep -qF "$want" <<<"$out"; then
  echo "FAIL rank_failure_ends_job: the failed rank's message is missing; output:"
  head -n 8 <<<"$out" | sed 's/^/    /'
  failed=1
elif grep -q "passed a barrier" <<<"$out"; then
  echo "FAIL rank_failure_ends_job: a rank went on past the failed one"
  failed=1
else
  echo "PASS rank_failure_ends_job (mpirun status $rc after ${took}s)"
fi
exit $failed
