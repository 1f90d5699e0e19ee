#!/usr/bin/env bash
# SPDX-License-Identifier: BSD-2-Clause
#
# The gpunvme command over NVMe/TCP, against the test suite's target
# (gpunvme-fake-target) on 127.0.0.1 serving an ext4 image:
#   cli_tcp.sh GPUNVME FAKE_TARGET MKMODEL GROUP
# Groups: basics (discover, id, fs commands, read/write, errors), load
# (load --verify with and without digests, 8 clients at once), die (the
# target dies mid-load: a clear error in bounded time, nothing reported
# loaded).
set -u
BIN=${1:?usage: cli_tcp.sh GPUNVME FAKE_TARGET MKMODEL GROUP}
FT=${2:?}
MK=${3:?}
GROUP=${4:?}
T=${CLI_TEST_TIMEOUT:-60}
command -v mkfs.ext4 >/dev/null 2>&1 || { echo "SKIP: no mkfs.ext4 (apt-get install e2fsprogs)"; exit 77; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-tcp.XXXXXX")
FT_PID=
cleanup() {
	[ -n "$FT_PID" ] && kill "$FT_PID" 2>/dev/null
	[ -n "$FT_PID" ] && wait "$FT_PID" 2>/dev/null
	rm -rf "$WORK"
}
trap cleanup EXIT
OUT=$WORK/stdout
ERR=$WORK/stderr
FAILS=0
CHECKS=0
FAIL_TAG=$GROUP
BAD_GREP=-F
. "$(dirname "${BASH_SOURCE[0]}")/../harness/cli_checks.sh"

expect_out() {
	grep -qF -- "$1" "$OUT" || { fail "stdout lacks '$1'"; show; }
}

# an ext4 image with a 24 MiB model and a data file
mkdir -p "$WORK/tree"
"$MK" --format safetensors --size 24M --seed 7 -o "$WORK/tree/model.safetensors" >/dev/null ||
	{ echo "FAIL: gpunvme-mkmodel"; exit 1; }
head -c 300000 /dev/urandom >"$WORK/tree/data.bin"
truncate -s 96M "$WORK/disk.img"
mkfs.ext4 -q -F -d "$WORK/tree" "$WORK/disk.img" || { echo "FAIL: mkfs.ext4"; exit 1; }

# start_target [ARGS...]: the target in the background; sets PORT, URI
start_target() {
	mkfifo "$WORK/ft.in" 2>/dev/null
	"$FT" --image "$WORK/disk.img" "$@" <"$WORK/ft.in" >"$WORK/ft.out" 2>"$WORK/ft.err" &
	FT_PID=$!
	exec 9>"$WORK/ft.in" # held open: the target runs until it closes
	for _ in $(seq 100); do
		[ -s "$WORK/ft.out" ] && break
		sleep 0.05
	done
	PORT=$(awk '{print $2}' "$WORK/ft.out")
	[ -n "$PORT" ] || { echo "FAIL: the fake target did not start: $(cat "$WORK/ft.err")"; exit 1; }
	NQN=nqn.2026-11.io.gpunvme:fake
	URI="tcp://127.0.0.1:$PORT/$NQN"
}

group_basics() {
	start_target
	ok discover "tcp://127.0.0.1:$PORT" && expect_out "tcp://127.0.0.1:$PORT/$NQN"
	ok discover "tcp://127.0.0.1:$PORT" --json && grep -q '"subnqn": "nqn.2026-11.io.gpunvme:fake"' "$OUT" ||
		fail "discover --json"
	ok id-ctrl "$URI" && expect_out "gpunvme fake NVMe/TCP target"
	ok id-ns "$URI" --json
	ok ls "$URI" / && expect_out "model.safetensors"
	ok extents "$URI" /data.bin && expect_out "1 extent"
	ok cat "$URI" /data.bin && cmp -s "$OUT" "$WORK/tree/data.bin" || fail "cat over tcp differs"
	# blocks written by the host land in the image; blocks put in the
	# image are what the host reads (the reverse direction)
	head -c 65536 /dev/urandom >"$WORK/w.bin"
	ok write "$URI" --slba 180000 --nlb 128 --in "$WORK/w.bin"
	dd if="$WORK/disk.img" of="$WORK/w.back" bs=512 skip=180000 count=128 status=none
	cmp -s "$WORK/w.bin" "$WORK/w.back" || fail "host write not in the target's image"
	head -c 32768 /dev/urandom >"$WORK/r.bin"
	dd if="$WORK/r.bin" of="$WORK/disk.img" bs=512 seek=181000 conv=notrunc status=none
	ok read "$URI" --slba 181000 --nlb 64 --out "$WORK/r.back"
	cmp -s "$WORK/r.bin" "$WORK/r.back" || fail "host read differs from the target's image"
	ok read "$URI?hdgst=1&ddgst=1" --slba 181000 --nlb 64 --out "$WORK/r.back2"
	cmp -s "$WORK/r.bin" "$WORK/r.back2" || fail "read with digests differs"
	ok perf "$URI" -q 8 -o 64K -w randread -t 0.3
	# errors: one line, the fix named
	bad 1 "no BAR0" show-regs "$URI"
	bad 1 "no subsystem NQN" id-ctrl "tcp://127.0.0.1:$PORT"
	bad 1 "unknown subsystem NQN" id-ctrl "tcp://127.0.0.1:$PORT/nqn.2026-11.io.gpunvme:nope"
	bad 1 "unknown option 'frob'" id-ctrl "$URI?frob=1"
	bad 2 "expected tcp://HOST" id-ctrl "tcp:127.0.0.1"
	kill "$FT_PID"
	wait "$FT_PID" 2>/dev/null
	FT_PID=
	bad 1 "is the target listening" id-ctrl "$URI?timeout=1000"
}

group_load() {
	start_target
	ok load "$URI" /model.safetensors --tier cpu --verify --no-progress && expect_out "verified against the CPU path"
	ok load "$URI?hdgst=1&ddgst=1" /model.safetensors --tier cpu --verify --no-progress &&
		expect_out "verified against the CPU path"
	# the tier policy: NVMe/TCP cannot DMA into GPU memory, so tier 2 is
	# refused for the volume (before any GPU is looked for: the same here
	# and on the GPU machine), naming the fix; id-ctrl shows why
	bad 1 "needs a controller that can DMA into GPU memory" load "$URI" /model.safetensors --tier 2 --no-progress &&
		{ grep -q "and tcp:.* cannot: use " "$ERR" || { fail "the refusal names no controller or fix"; show; }; }
	# perf --gpu asks the same policy; a machine without a GPU hears that
	# first (docs/cli.md), one with a GPU the policy's refusal
	BAD_GREP=-E bad 1 "needs a controller that can DMA into GPU memory|no CUDA GPU" \
		perf "$URI" -q 4 -o 4K -w randread -t 1 --gpu --tier 2
	ok id-ctrl "$URI" && expect_out "caps      : gpu-queues"
	# 8 clients at once, each its own association; all must verify
	local pids=() i
	for i in $(seq 8); do
		timeout -k 5 "$T" "$BIN" load "$URI" /model.safetensors --tier cpu --verify --no-progress --json \
			>"$WORK/c$i.out" 2>"$WORK/c$i.err" &
		pids+=($!)
	done
	for i in $(seq 8); do
		CHECKS=$((CHECKS + 1))
		wait "${pids[$((i - 1))]}" || { fail "client $i: exit $?: $(head -c 500 "$WORK/c$i.err")"; continue; }
		grep -q '"verified": true' "$WORK/c$i.out" || fail "client $i: not verified"
	done
	# every client saw the same bytes
	local h1
	h1=$(python3 -c 'import json,sys; print(sorted((t["name"],t["sha256"]) for t in json.load(open(sys.argv[1]))["tensors"]))' "$WORK/c1.out" 2>/dev/null | sha256sum)
	for i in $(seq 2 8); do
		[ "$(python3 -c 'import json,sys; print(sorted((t["name"],t["sha256"]) for t in json.load(open(sys.argv[1]))["tensors"]))' "$WORK/c$i.out" 2>/dev/null | sha256sum)" = "$h1" ] ||
			fail "client $i loaded different bytes"
	done
}

group_die() {
	# the target dies after 6 MiB of a 24 MiB load: exit 1, one clear
	# line, within 15 s, and no "tensors ... in" summary
	start_target --die-after 6291456
	local t0=$SECONDS
	bad 1 "" load "$URI" /model.safetensors --tier cpu --no-progress
	[ $((SECONDS - t0)) -le 15 ] || fail "the failed load took $((SECONDS - t0)) s"
	grep -qE "connection|target" "$ERR" || { fail "the error does not say the target went away"; show; }
	grep -q "tensors" "$OUT" && grep -q " in [0-9.]* s" "$OUT" && fail "a summary was printed for a failed load"
	# and after it died, opening fails fast and says why
	bad 1 "" id-ctrl "$URI?timeout=1000"
}

case "$GROUP" in
basics | load | die) "group_$GROUP" ;;
*) echo "unknown group '$GROUP'" >&2; exit 2 ;;
esac
if [ $FAILS -ne 0 ]; then
	echo "nvmf.cli.$GROUP: $FAILS failure(s) in $CHECKS invocations" >&2
	exit 1
fi
echo "nvmf.cli.$GROUP: $CHECKS invocations passed"
