#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# GPU-initiated 4 KiB random-read IOPS on the emulator's null namespace, a
# sweep of emulator workers x queues, and the CPU data path (gpunvme perf) on
# the same configurations in the same run. Each GPU point runs for
# SECONDS_PER_POINT (default 2 s). Usage: bench/gpu_iops.sh BUILD_DIR
set -uo pipefail
B=${1:-build}
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader) cpus=$(nproc)"
echo "path,mode,workers,queues,depth,threads,reads,seconds,iops,errors,io_bytes,mb_per_s"
for w in 1 2 4 8 12; do
	for q in $w $((2 * w)) $((4 * w)); do
		# threads: 4 per queue slot, at most 65536
		t=$((q * 4096)); [ $t -gt 65536 ] && t=65536
		for m in 0 1; do
			echo -n "gpu,"
			"$B/bin/bench_gpu_iops" -w $w -q $q -d 1024 -t $t -s ${SECONDS_PER_POINT:-2} -m $m || echo ",,,,,,,,failed"
		done
	done
	# CPU baseline: one perf thread per queue pair, as many queue pairs as workers
	qcpu=$(( w < 4 ? w : 4 ))
	r=$("$B/bin/gpunvme" perf "emu:null:1T?lbads=12&workers=$w&nsq=$qcpu" -q 128 -o 4K -w randread -t 3 \
		--queues $qcpu --json 2>/dev/null | tr -d '\n' | sed -n 's/.*"iops":[ ]*\([0-9.]*\).*/\1/p')
	echo "cpu,perf,$w,$qcpu,128,$qcpu,,3,$r,"
done
