#!/usr/bin/env bash
# Starts a command, waits for the moment MODE names, sends a signal, and
# reports how the command ended: "exit status N" on stdout (0 from this
# script itself; the bad-input table checks that line and what was left).
#   rank1 LOG -- mpirun ...   : at the second epoch_start in LOG, SIGKILL to
#                               rank 1 (what a crashed rank looks like)
#   term LOG -- mpirun ...    : at the second epoch_start, SIGTERM to mpirun
#                               (what a batch system's time limit sends)
#   int LOG -- trainer ...    : at the second epoch_start, SIGINT (Ctrl-C)
# A SIGKILL at a fixed point of the work is kill_at.c's, preloaded: a signal
# sent from here arrives when the poll below sees the line, late on a loaded
# machine; the runs above go on for many epochs, so that late is harmless.
# A moment that never comes (the command ended first) is said on stdout:
# "ended before the signal".
# Usage: signal_run.sh MODE LOG -- COMMAND...
set -uo pipefail
set -m  # the command in a process group of its own, as from a terminal
mode=$1 watch=$2
shift 3
# A signal ignored on entry stays ignored for every child (a test run started
# in the background of a non-interactive shell ignores SIGINT, and the trainer
# rightly keeps it so): the command starts with the default dispositions, as
# from a terminal.
env --default-signal=INT,TERM,HUP "$@" >/dev/null 2>&1 &
job=$!
arrived() {
  [[ -f $watch ]] && (($(grep -c '"key": "epoch_start"' "$watch") >= 2))
}
for _ in $(seq 6000); do
  arrived && break
  kill -0 "$job" 2>/dev/null || break
  sleep 0.01
done
if ! arrived; then
  echo "ended before the signal"
else
  case $mode in
    rank1)
      for pid in $(pgrep -f -- "--log_file=$watch"); do
        if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=1'; then
          kill -KILL "$pid"
        fi
      done ;;
    term) kill -TERM "$job" ;;
    int) kill -INT "$job" ;;
  esac
fi
wait "$job"
echo "exit status $?"
