#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# One QEMU scenario run N times as pairs of VMs at once, the guest binary of
# build A in one and of build B in the other (each loads the other, as CI's
# parallel runs do), each run once (no crash retry): how often QEMU crashed
# and how often the guest failed, per side. How the reset's queue deletion
# was measured (tests/qemu/README.md):
#   tests/qemu/ab_pairs.sh recovery_reads 15 OLD/bin/qemu_driver build/bin/qemu_driver
# OLD: a build of the tree before it (git worktree add /tmp/old 39d59a5;
# cmake -S /tmp/old -B /tmp/old/build && cmake --build /tmp/old/build -t qemu_driver).
# CACHE (default build/qemu-cache): the guest kernel (scripts/qemu/setup.sh).
set -u
[ $# -eq 4 ] || { echo "usage: $0 SCENARIO N BINARY_A BINARY_B" >&2; exit 2; }
SCN=$1 N=$2 BIN_A=$(realpath "$3") BIN_B=$(realpath "$4")
HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${CACHE:-$HERE/../../build/qemu-cache}
W=$(mktemp -d "${TMPDIR:-/tmp}/ab_pairs.XXXXXX")
trap 'rm -rf "$W"' EXIT
declare -A CRASH=([a]=0 [b]=0) FAIL=([a]=0 [b]=0) PASS=([a]=0 [b]=0)
one() { # one SIDE BINARY: prints the side and the run's verdict
	mkdir -p "$W/$1"
	QEMU_CRASH_RUNS=1 "$HERE/run.sh" -s "$SCN" -c "$CACHE" -w "$W/$1" -t 300 "$2" > "$W/$1.out" 2>&1
	local rc=$?
	if grep -qE 'qemu exit (134|135|139)$' "$W/$1.out"; then echo "$1 crash"
	elif [ $rc -eq 0 ]; then echo "$1 pass"
	else echo "$1 fail"; fi
}
for ((i = 1; i <= N; i++)); do
	while read -r side verdict; do
		case $verdict in crash) CRASH[$side]=$((CRASH[$side] + 1)) ;; fail) FAIL[$side]=$((FAIL[$side] + 1)) ;;
		*) PASS[$side]=$((PASS[$side] + 1)) ;; esac
	done < <(one a "$BIN_A" & one b "$BIN_B" & wait)
done
for s in a b; do
	echo "$s ($([ $s = a ] && echo "$BIN_A" || echo "$BIN_B")): $N runs, ${CRASH[$s]} QEMU crashes, ${FAIL[$s]} guest failures, ${PASS[$s]} passed"
done
