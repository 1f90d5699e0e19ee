#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Why the combination matrix's "C layer stream x NVMe/TCP x Tier 1" cell
# takes 61 s on the GPU machine when every other cell takes ~1 s (gpu.matrix
# run of 2026-11-27, H200): the same model (gpunvme-mkmodel 4M, seed 31, in a
# 24 MiB ext4 image) behind the fake target on loopback, matrix_stream at
# Tier cpu and 1 with a timestamp on each window's line, the stream's trace
# (GPUNVME_STREAM_TRACE), and the threads' kernel wait channels every 2 s.
#   OUT=DIR BD=build-gpu bash bench/tcp_stream_diag.sh
set -u
R=${OUT:?set OUT}/tcpdiag
mkdir -p "$R"
BD=${BD:-build-gpu}
B=$BD/bin
[ "${SKIP_BUILD:-0}" = 1 ] || cmake -S . -B "$BD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$R/cmake.log" 2>&1 &&
	cmake --build "$BD" -j"$(nproc)" --target matrix_stream gpunvme-mkmodel gpunvme-fake-target gpunvme-cli >"$R/build.log" 2>&1 ||
	{ echo "BUILD FAILED"; tail -30 "$R/build.log"; exit 1; }
W=$(mktemp -d /tmp/tcpdiag.XXXXXX)
mkdir -p "$W/root/m"
$B/gpunvme-mkmodel --format safetensors --size 4M --seed 31 -o "$W/root/m/model.safetensors" >/dev/null
mkfs.ext4 -q -F -b 4096 -d "$W/root" "$W/fs.img" 24M || exit 1
mkfifo "$W/in"
$B/gpunvme-fake-target --image "$W/fs.img" <"$W/in" >"$W/ft.out" 2>"$R/ft.err" &
FT=$!
exec 9>"$W/in"
for _ in $(seq 50); do [ -s "$W/ft.out" ] && break; sleep 0.1; done
U="tcp://127.0.0.1:$(awk '{print $2}' "$W/ft.out")/nqn.2026-11.io.gpunvme:fake"
stamp() { while IFS= read -r l; do echo "$(date +%s.%N | cut -c1-14) $l"; done; }
for t in ${TIERS:-cpu 1 1}; do
	echo "=== matrix_stream tier $t"
	GPUNVME_STREAM_TRACE=$R/trace-$t.txt $B/matrix_stream "$U" /m/model.safetensors "$W/root/m/model.safetensors" $t 2>&1 | stamp &
	P=$!
	for k in $(seq 45); do
		sleep 2
		kill -0 $P 2>/dev/null || break
		pid=$(pgrep -n matrix_stream) || continue
		[ $k = 3 ] && command -v gdb >/dev/null && timeout 60 gdb -p "$pid" -batch -ex "thread apply all bt" >"$R/bt-$t.txt" 2>&1
		{ echo "--- t=$((k * 2)) s pid $pid"; for d in /proc/$pid/task/*; do echo "$(cat $d/comm) $(cat $d/wchan) $(awk '{print $3, $14, $15}' $d/stat)"; done; } >>"$R/threads-$t.txt"
	done
	wait $P
	echo "rc $? at $(date +%s.%N | cut -c1-14)"
done
echo "=== load --tier 1 --verify"
/usr/bin/time -f "%e s" timeout 120 $B/gpunvme load "$U" /m/model.safetensors --tier 1 --verify --no-progress 2>&1 | tail -3
exec 9>&-
kill $FT 2>/dev/null
rm -rf "$W"
