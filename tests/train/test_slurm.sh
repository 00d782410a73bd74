#!/usr/bin/env bash
# The Slurm launch path for real: a one-node Slurm started here (munged,
# slurmctld and slurmd from Debian's slurm-wlm, run in the foreground from a
# scratch folder with their own config, ports and key; no systemd, no
# cgroups: proctrack/linuxproc, task/none), then a 2-rank training of the
# small Transformer on a 400-pair slice of its generated set through
# `srun --mpi=pmix`, which must train over 2 ranks: exit 0, one rank-0
# output (not two single-rank runs), an epoch line, and a log whose
# global_batch_size is 2 x max_tokens (each rank adds its own max_tokens)
# and that the compliance checker accepts. SKIP, with the reason, when Slurm
# is not installed (make deps installs it), cannot start here or has no
# PMIx; the daemons, the job and the scratch folder go whatever happens.
# Usage: tests/train/test_slurm.sh BUILD_DIR
set -uo pipefail
build=${1:-build}
cd "$(dirname "$0")/../.."
source tests/lib.sh
trainer=$build/bin/transformer
conf=translation/configs/small.conf
name=slurm_srun_two_ranks

for b in transformer wmt_generate wmt_to_lmdb; do
  if [[ ! -x $build/bin/$b ]]; then
    echo "FAIL $name: $build/bin/$b is not built"
    exit 1
  fi
done
if ! has_mpi "$trainer"; then
  echo "SKIP $name: no MPI in this build (srun starts MPI ranks)"
  exit 0
fi
for b in munged slurmctld slurmd srun sinfo scancel; do
  if ! command -v "$b" >/dev/null && [[ ! -x /usr/sbin/$b ]]; then
    echo "SKIP $name: $b is not installed (make deps installs slurm-wlm and munge)"
    exit 0
  fi
done
if [[ $(id -u) != 0 ]]; then
  echo "SKIP $name: slurmd must run as root to launch job steps (this test starts its own Slurm)"
  exit 0
fi
export PATH=$PATH:/usr/sbin

tmp=$(mktemp -d)
pids=()
# our_stepds: the slurmstepd processes of this script's slurmd (they run
# detached, and carry its SLURM_CONF).
our_stepds() {
  local p
  for p in $(pgrep -x slurmstepd); do
    { tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null | grep -qxF "SLURM_CONF=$tmp/slurm.conf" && echo "$p"
  done
}
cleanup() {
  # The job first (its ranks end with it; a step that cannot end is
  # killed), then the daemons this script started, by their process ids,
  # then the folder.
  local p
  if [[ -f $tmp/slurm.conf ]]; then
    SLURM_CONF=$tmp/slurm.conf timeout 10 scancel --quiet --user=root >/dev/null 2>&1
    for _ in 1 2 3 4 5 6 7 8 9 10; do [[ -z $(our_stepds) ]] && break; sleep 0.5; done
    for p in $(our_stepds); do kill -9 "$p" 2>/dev/null; done
  fi
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${pids[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.5; done
    kill -9 "$p" 2>/dev/null
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# skip_with WHY FILE...: the reason Slurm could not start, with the last
# error line of the daemon's log and output that says why.
skip_with() {
  local why=$1 detail
  shift
  detail=$(cat "$@" 2>/dev/null | grep -iE 'error|fatal' | tail -n 1)
  echo "SKIP $name: $why${detail:+ ($detail)}"
  exit 0
}

# wait_for SECONDS COMMAND...: COMMAND succeeds within SECONDS.
wait_for() {
  local end=$((SECONDS + $1))
  shift
  until "$@" >/dev/null 2>&1; do
    ((SECONDS < end)) || return 1
    sleep 0.5
  done
}

# 1. munge: its own key and socket.
mkdir -p "$tmp/munge" "$tmp/state" "$tmp/spool"
chmod 700 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/munge/munge.key"
munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/sock" \
  --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
  --seed-file="$tmp/munge/seed" >"$tmp/munge/out" 2>&1 &
pids+=($!)
wait_for 10 test -S "$tmp/munge/sock" ||
  skip_with "munged did not start" "$tmp/munge/munged.log" "$tmp/munge/out"

# 2. Slurm: one node (this host, as many CPUs as it has), two ports that are
# free now, everything under the scratch folder.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
node=$(hostname -s)
cat >"$tmp/slurm.conf" <<EOF
ClusterName=mlsuite-test
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$tmp/munge/sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SlurmdTimeout=30
PlugStackConfig=$tmp/plugstack.conf
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=$node Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF
: >"$tmp/plugstack.conf"
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N "$node" >"$tmp/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [[ $(sinfo -h -N -o %t 2>/dev/null) == idle* ]]; }
if ! wait_for 30 node_idle; then
  kill -0 "${pids[1]}" 2>/dev/null || skip_with "slurmctld did not start" "$tmp"/slurmctld.{log,out}
  kill -0 "${pids[2]}" 2>/dev/null || skip_with "slurmd did not start" "$tmp"/slurmd.{log,out}
  skip_with "the node did not come up idle (sinfo: $(sinfo -h -N -o %t 2>&1 | head -n 1))" \
    "$tmp"/slurmd.{log,out}
fi

# 3. PMIx: Debian's Open MPI finds its rank through PMIx only (it is built
# with an external PMIx and no PMI2 client: under srun --mpi=pmi2 each rank
# stops in MPI_Init, "requires that you configure and build SLURM
# --with-pmix").
mpi=pmix
mpi_list=$(srun --mpi=list 2>&1)
if ! grep -q pmix <<<"$mpi_list"; then
  echo "SKIP $name: this Slurm has no PMIx plugin, which Open MPI needs (srun --mpi=list: $(tr '\n' ' ' <<<"$mpi_list"))"
  exit 0
fi

# A job step of two echoes: when Slurm cannot launch tasks here, that is
# this machine's Slurm, not the trainer (srun may exit 0 even then).
timeout 60 srun -N 1 -n 2 --time=1 echo slurm-task >"$tmp/echo.out" 2>&1
if [[ $(grep -c '^slurm-task$' "$tmp/echo.out") != 2 ]]; then
  skip_with "Slurm cannot launch tasks here (srun -n 2 echo)" "$tmp/echo.out" "$tmp/slurmd.log"
fi

# 4. The data: a 400-pair slice of the generated set.
if ! TRAIN_PAIRS=400 EVAL_PAIRS=40 bash translation/prepare_data.sh small "$tmp/mini" "$build" \
  >"$tmp/prep.out" 2>&1; then
  echo "FAIL $name: preparing the data: $(tail -n 1 "$tmp/prep.out")"
  exit 1
fi

# 5. Two ranks through srun, one epoch.
max_tokens=$(sed -n 's/^max_tokens *= *\([0-9]*\).*/\1/p' $conf)
PROGRESS_INTERVAL_S=1000 timeout 120 srun --mpi=$mpi -N 1 -n 2 --time=3 "$trainer" --config=$conf \
  --device=cpu --data_dir="$tmp/mini" --log_file="$tmp/two.log" --max_epochs=1 >"$tmp/two.out" 2>&1
rc=$?
logged=$(grep -o '"key": "global_batch_size", "value": [0-9]*' "$tmp/two.log" 2>/dev/null | sed 's/.*: //')
got=$(grep -o '"key": "eval_accuracy", "value": [0-9.e-]*' "$tmp/two.log" 2>/dev/null | sed 's/.*: //')
epochs=$(grep -c '^transformer: epoch 1:' "$tmp/two.out")
if [[ $rc == 0 && $epochs == 1 && -n $max_tokens && $logged == $((2 * max_tokens)) && -n $got ]] &&
  python3 logs/result.py --target "$got" "$tmp/two.log" >"$tmp/check.out" 2>&1; then
  echo "PASS $name (srun --mpi=$mpi -n 2: global batch $logged tokens = 2 x $max_tokens;" \
    "$(grep '^transformer: epoch 1:' "$tmp/two.out" | cut -d, -f1))"
else
  echo "FAIL $name: srun --mpi=$mpi exit $rc; $epochs rank-0 epoch lines (want 1);" \
    "global_batch_size '$logged' (want $((2 * max_tokens))); checker: $(tail -n 1 "$tmp/check.out" 2>/dev/null);" \
    "$(grep -E '^error|^srun|^\[|PMIX|pmix' "$tmp/two.out" | head -n 3 | tr '\n' ' ')"
fi
