#!/usr/bin/env bash
# Starts a trainer, waits for its second epoch_start in LOG, sends a signal,
# and reports how the run ended: "exit status N" on stdout (0 from this
# script itself; the bad-input table checks the log and that line).
#   rank1 LOG -- mpirun ... : SIGKILL to rank 1 (what a crashed rank looks like)
#   int   LOG -- trainer ...: SIGINT to the trainer (Ctrl-C)
# Usage: signal_run.sh rank1|int LOG -- COMMAND...
set -uo pipefail
set -m  # the trainer in a process group of its own, as from a terminal
mode=$1 log=$2
shift 3
# A signal ignored on entry stays ignored for every child (a test run started
# in the background of a non-interactive shell ignores SIGINT, and the trainer
# rightly keeps it so): the trainer starts with the default dispositions, as
# from a terminal.
env --default-signal=INT,TERM,HUP "$@" >/dev/null 2>&1 &
job=$!
for _ in $(seq 600); do
  [[ -f $log ]] && (( $(grep -c '"key": "epoch_start"' "$log") >= 2 )) && break
  sleep 0.1
done
case $mode in
  rank1)
    for pid in $(pgrep -f -- "--log_file=$log"); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
        kill -KILL "$pid"
      fi
    done ;;
  int) kill -INT "$job" ;;
esac
wait "$job"
echo "exit status $?"
