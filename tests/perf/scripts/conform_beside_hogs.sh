#!/usr/bin/env bash
# The main job on a busy machine, as a new user would run it, against a quiet run:
#   tests/perf/scripts/conform_beside_hogs.sh HOGS [OUT]
# A fresh clone of this repository's HEAD into OUT (default: a new folder under
# /tmp), HOME an empty folder, HOGS processes of `while True: pass` beside
# `make conform` (0: a quiet run). Prints the exit status and the seconds it
# took, and what /tmp and /dev/shm held before and after. Issue 25's figure:
# one run with 0 and one with 4, one after the other, on the same machine.
set -uo pipefail
hogs=${1:?usage: $0 HOGS [OUT]}
out=${2:-$(mktemp -d /tmp/conform-beside-hogs-XXXX)}
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
mkdir -p "$out"
git clone -q "$repo" "$out/clone"
home=$(mktemp -d)
ls -A /tmp | sort > "$out/tmp-before.txt"; ls -A /dev/shm | sort > "$out/shm-before.txt"
pids=()
for _ in $(seq 1 "$hogs"); do python3 -c 'while True: pass' & pids+=($!); done
trap 'kill "${pids[@]}" 2>/dev/null; rm -rf "$home"' EXIT
start=$(date +%s)
(cd "$out/clone" && HOME=$home make conform) > "$out/log.txt" 2>&1
rc=$?
elapsed=$(( $(date +%s) - start ))
kill "${pids[@]}" 2>/dev/null
sleep 5
ls -A /tmp | sort > "$out/tmp-after.txt"; ls -A /dev/shm | sort > "$out/shm-after.txt"
echo "hogs=$hogs exit=$rc seconds=$elapsed log=$out/log.txt"
echo "/tmp, new since before:"; comm -13 "$out/tmp-before.txt" "$out/tmp-after.txt"
echo "/dev/shm, new since before:"; comm -13 "$out/shm-before.txt" "$out/shm-after.txt"
