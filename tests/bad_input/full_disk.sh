#!/usr/bin/env bash
# Runs a command with DIR on a full disk: in a mount namespace of its own
# (nothing is mounted for anyone else, and the mount goes when the command
# ends), a tmpfs over DIR, holding a copy of DIR.before when there is one,
# then filled up; then the command. What DIR holds afterwards is copied
# to DIR.after for the bad-input table's checks. Exits with the command's
# status (its stdout and stderr pass through); 99 with "cannot mount" when
# the machine allows no mount namespace.
# Usage: full_disk.sh DIR -- COMMAND...
set -uo pipefail
dir=$1
shift 2
if ! unshare --mount --propagation private true 2>/dev/null; then
  echo "full_disk: cannot mount a tmpfs here (no mount namespace)" >&2
  exit 99
fi
mkdir -p "$dir" "$dir.after"
exec unshare --mount --propagation private bash -c '
  dir=$1
  shift
  before=0
  [[ -d $dir.before ]] && before=$(du -sb "$dir.before" | cut -f1)
  mount -t tmpfs -o size=$((before + 1048576)),mode=0755 full_disk "$dir" || exit 99
  [[ -d $dir.before ]] && cp -a "$dir.before/." "$dir/"
  # Fill what is left; the file keeps what fit.
  head -c 4M /dev/zero >"$dir/.fill" 2>/dev/null
  "$@"
  rc=$?
  rm -f "$dir/.fill"
  cp -a "$dir/." "$dir.after/"
  exit $rc' full_disk "$dir" "$@"
