#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# GPU-initiated reads against a modeled SSD (emulator device model: Gen4 x4,
# 7 GB/s, 1 M IOPS, 80 us per command): share of the modeled limit at 4 KiB
# and 1 MiB, and QD1 latency over the modeled 80 us; CPU perf on the same
# model in the same run. Usage: bench/gpu_model.sh BUILD_DIR
set -uo pipefail
B=${1:-build}
M="latency_us=80&read_mbps=7000&iops=1000000&mdts=8"
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) cpus=$(nproc) model: $M"
echo "what,mode,workers,queues,depth,threads,reads,seconds,iops,errors,io_bytes,mb_per_s"
echo -n "gpu-4k,";  "$B/bin/bench_gpu_iops" -w 4 -q 16 -d 1024 -t 65536 -n 8 -m 1 -u "$M"
echo -n "gpu-1m,";  "$B/bin/bench_gpu_iops" -w 4 -q 16 -d 256 -t 1024 -n 8 -m 1 -b 1048576 -u "$M"
echo -n "gpu-qd1,"; "$B/bin/bench_gpu_iops" -w 1 -q 1 -d 64 -t 1 -n 2000 -m 0 -u "$M"
for args in "-q 256 -o 4K -w randread --queues 4" "-q 16 -o 1M -w randread --queues 2" "-q 1 -o 4K -w randread --queues 1"; do
	echo "cpu: gpunvme perf emu:null:1T?lbads=12&workers=4&$M $args -t 3"
	"$B/bin/gpunvme" perf "emu:null:1T?lbads=12&workers=4&nsq=4&$M" $args -t 3 2>&1 | tail -n 1
done
