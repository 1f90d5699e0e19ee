#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The GPU path over NVMe/TCP on the GPU machine (issue 18): GPU threads
# drive host-memory queues that CPU proxies forward as capsules
# (src/nvmf/proxy.c), against a target on loopback.
#
# The target is this project's own test server (tests/nvmf/fake_target.c,
# program gpunvme-fake-target, one RAM- or file-backed namespace): Linux's
# nvmet cannot be used there (the device machine's kernel modules are not
# ours to load, and nothing outside the machine can be reached). So these
# numbers measure our host + proxy + loopback TCP, not a storage server.
#   OUT=/some/dir bash bench/tcp_gpu_run.sh
# Steps (bounded to fit a 10-minute call): build with CUDA; the tcp/nvmf
# tests and the GPU tests; an ext4 image with a 1 GiB model served by the
# fake target; gpunvme load over tcp:// with --tier cpu (the CPU path), 1
# (GPU queues through the proxies, Tier 1 buffers) and 2 (expected to be
# refused with the reason: no bus addresses for GPU memory over TCP), each
# --verify; perf --gpu over tcp at QD1 and at depth against the CPU path's
# perf; then the same perf against the emulator for the local-controller
# baseline.
R=${OUT:?set OUT}/r
mkdir -p "$R"
exec > >(tee "$R/run.log") 2>&1
{ git log -1 --format='%h %s' 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; nproc; nvcc --version | tail -1; } | tee "$R/machine.txt"
cmake -S . -B bd -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$R/cmake.log" 2>&1 &&
	cmake --build bd -j16 >"$R/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$R/build.log"; exit 1; }
B=bd/bin
echo "=== ctest -L 'tcp|gpu' (the qemu.nvmet scenario skips here: no QEMU cache)"
(cd bd && timeout 240 ctest -L 'tcp|gpu' -j8 >"$R/ctest.log" 2>&1; grep -E "tests passed|Failed|\*\*\*" "$R/ctest.log")

W=$(mktemp -d /tmp/tcpgpu.XXXXXX)
mkdir -p "$W/tree/models"
$B/gpunvme-mkmodel --format safetensors --size 1G --seed 3 -o "$W/tree/models/m.safetensors" >/dev/null
truncate -s 1600M "$W/fs.img" && mkfs.ext4 -q -F -d "$W/tree" "$W/fs.img" || { echo "mkfs failed"; exit 1; }
mkfifo "$W/in"
$B/gpunvme-fake-target --image "$W/fs.img" <"$W/in" >"$W/ft.out" 2>"$W/ft.err" &
FT=$!
exec 9>"$W/in"
for _ in $(seq 50); do [ -s "$W/ft.out" ] && break; sleep 0.1; done
PORT=$(awk '{print $2}' "$W/ft.out")
U="tcp://127.0.0.1:$PORT/nqn.2026-11.io.gpunvme:fake"
echo "target: $U (gpunvme-fake-target, loopback)"

echo "=== load over tcp, each tier, --verify"
for t in cpu 1 2; do
	echo "--- tier $t"
	timeout 120 $B/gpunvme load "$U" /models/m.safetensors --tier $t --verify --no-progress 2>&1 | tail -2
done | tee "$R/load.txt"

echo "=== perf over tcp: CPU path vs GPU threads (Tier 1, proxies)"
{
	for q in 1 32; do
		echo "--- cpu qd$q 4K randread"; timeout 30 $B/gpunvme perf "$U" -q $q -o 4K -w randread -t 5 | tail -1
		echo "--- gpu qd$q 4K randread (thread mode)"; timeout 30 $B/gpunvme perf "$U" -q $q -o 4K -w randread -t 5 --gpu --gpu-mode thread --tier 1 | tail -1
	done
	echo "--- cpu 4x32 128K read"; timeout 30 $B/gpunvme perf "$U" -Q 4 -q 32 -o 128K -w read -t 5 | tail -1
	echo "--- gpu 4x32 128K read"; timeout 30 $B/gpunvme perf "$U" -Q 4 -q 32 -o 128K -w read -t 5 --gpu --tier 1 | tail -1
} | tee "$R/perf_tcp.txt"

echo "=== the local-controller baseline: the emulator modelling an SSD, same perf lines"
M='emu:null:16G?latency_us=80&read_mbps=7000&iops=1000000&mdts=8'
{
	echo "--- cpu qd1"; timeout 30 $B/gpunvme perf "$M" -q 1 -o 4K -w randread -t 5 | tail -1
	echo "--- gpu qd1"; timeout 30 $B/gpunvme perf "$M" -q 1 -o 4K -w randread -t 5 --gpu --gpu-mode thread --tier 1 | tail -1
} | tee "$R/perf_local.txt"
exec 9>&-
wait $FT
rm -rf "$W"
date -u
