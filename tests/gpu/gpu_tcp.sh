#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The GPU path over NVMe/TCP on a GPU (issue 30): GPU threads drive
# host-memory queues that a CPU proxy per queue forwards to the suite's
# fake target on loopback (src/nvmf/proxy.c). The device queues use CIDs
# that grow past the queue depth, which a CPU stand-in never did:
#   - gpunvme load --tier 1 --verify of a 48 MiB model (thousands of
#     commands, so CIDs pass the depth many times): exact;
#   - gpunvme perf --gpu --tier 1 at QD1 and at 4x32: prints its figures
#     (before the fix: nothing, each command after the first `depth` lost).
#   gpu_tcp.sh GPUNVME FAKE_TARGET MKMODEL
# Exit 0 pass, 1 fail, 77 without a GPU.
set -u
BIN=${1:?usage: gpu_tcp.sh GPUNVME FAKE_TARGET MKMODEL}
FT=${2:?}
MK=${3:?}
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU' || { echo "no CUDA GPU: skipped"; exit 77; }
command -v mkfs.ext4 >/dev/null 2>&1 || { echo "FAIL: no mkfs.ext4 (apt-get install e2fsprogs)"; exit 1; }
W=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-gputcp.XXXXXX")
FT_PID=
cleanup() {
	[ -n "$FT_PID" ] && kill "$FT_PID" 2>/dev/null
	[ -n "$FT_PID" ] && wait "$FT_PID" 2>/dev/null
	rm -rf "$W"
}
trap cleanup EXIT
mkdir -p "$W/tree/models"
"$MK" --format safetensors --size 48M --seed 9 -o "$W/tree/models/m.safetensors" >/dev/null || { echo "FAIL: mkmodel"; exit 1; }
truncate -s 128M "$W/fs.img"
mkfs.ext4 -q -F -d "$W/tree" "$W/fs.img" || { echo "FAIL: mkfs.ext4"; exit 1; }
mkfifo "$W/in"
"$FT" --image "$W/fs.img" <"$W/in" >"$W/ft.out" 2>"$W/ft.err" &
FT_PID=$!
exec 9>"$W/in"
for _ in $(seq 100); do [ -s "$W/ft.out" ] && break; sleep 0.05; done
PORT=$(awk '{print $2}' "$W/ft.out")
[ -n "$PORT" ] || { echo "FAIL: the fake target did not start: $(cat "$W/ft.err")"; exit 1; }
U="tcp://127.0.0.1:$PORT/nqn.2026-11.io.gpunvme:fake"
fails=0
timeout -k 5 120 "$BIN" load "$U" /models/m.safetensors --tier 1 --verify --no-progress >"$W/load.out" 2>&1
rc=$?
if [ $rc -ne 0 ] || ! grep -q "verified against the CPU path" "$W/load.out"; then
	echo "FAIL: load --tier 1 --verify over tcp (rc $rc):"; tail -5 "$W/load.out"; fails=$((fails + 1))
else
	grep "tier 1" "$W/load.out" | tail -1
fi
for args in "-q 1 -o 4K -w randread" "-Q 4 -q 32 -o 128K -w read"; do
	# shellcheck disable=SC2086
	timeout -k 5 60 "$BIN" perf "$U" $args -t 2 --gpu --tier 1 >"$W/perf.out" 2>&1
	rc=$?
	if [ $rc -ne 0 ] || ! grep -qE '^total +[1-9][0-9]*' "$W/perf.out"; then
		echo "FAIL: perf --gpu --tier 1 $args over tcp (rc $rc):"; tail -5 "$W/perf.out"; fails=$((fails + 1))
	else
		echo "perf --gpu $args: $(grep -E '^total' "$W/perf.out")"
	fi
done
[ $fails -eq 0 ]
