#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The device run behind bench/results/gpu-2026-11-24/queue-core and
# queue-core-final (issue 12, acceptance 4): this tree ("new", the queue
# core) against a baseline commit ("old") in one run on one machine. Both
# are built with this tree's bench_gpu_iops.cu (its points run for a
# duration, -s), so the IOPS of old and new are measured the same way.
#   git archive -o head-snapshot.tar BASELINE_COMMIT      (in the repo root)
#   OUT=/some/dir bash bench/gpu_core_run.sh
# Steps (bounded to fit a 10-minute call): build both; GPU tests (new);
# QD1 against the modeled SSD, old/new alternating; warp-batch and thread
# IOPS on the null namespace, old/new alternating; compute-sanitizer
# memcheck/racecheck (new); Tier 2 bandwidth, 8 GiB, old and new.
R=$OUT/r; mkdir -p $R
exec > >(tee $R/run.log) 2>&1
{ git log -1 --format='new %h %s' 2>/dev/null; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; nproc; nvcc --version | tail -1; } | tee $R/machine.txt
build() { cmake -S $1 -B $1/bd -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $R/cmake-$2.log 2>&1 &&
  cmake --build $1/bd -j8 > $R/build-$2.log 2>&1 || { echo "BUILD $2 FAILED"; tail -30 $R/build-$2.log; }; }
mkdir -p /tmp/old && tar xf head-snapshot.tar -C /tmp/old && cp bench/bench_gpu_iops.cu /tmp/old/bench/
build /tmp/old old & p2=$!
build . new & p1=$!; wait $p1 $p2
N=bd/bin; O=/tmp/old/bd/bin
M="latency_us=80&read_mbps=7000&iops=1000000&mdts=8"
echo "=== GPU tests (new)"; (cd bd && timeout 150 ctest -L gpu > $R/ctest-gpu.log 2>&1; grep -E "Passed|Failed|tests passed" $R/ctest-gpu.log)
echo "=== qd1 model (lib gpunvme_dev_rw line: median us)"; i=0
for v in old new old new old new; do i=$((i+1)); F=$R/qd1-model.txt; B=$N; [ $v = old ] && B=$O
  echo "### run $i $v" >> $F; timeout 60 $B/bench_gpu_qd1 -n 2000 -u "$M" > $R/qd1.tmp 2>&1; cat $R/qd1.tmp >> $F
  echo "$v $(grep 'lib gpunvme_dev_rw' $R/qd1.tmp)"; done; rm -f $R/qd1.tmp
echo "=== iops old/new (bench_gpu_iops csv)"; for v in old new old new; do B=$N; [ $v = old ] && B=$O
  echo -n "$v,"; timeout 40 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -s 3 -m 1
  echo -n "$v,"; timeout 40 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -s 3 -m 0
done | tee $R/iops_old_new.csv
echo "=== sanitizers (new)"; for c in lanes faults; do timeout 60 compute-sanitizer --tool memcheck $N/test_gpu_queues $c > $R/san.tmp 2>&1; echo "memcheck $c rc=$? $(grep -E 'ERROR SUMMARY' $R/san.tmp)"; cat $R/san.tmp >> $R/sanitizers.log; done
timeout 60 compute-sanitizer --tool racecheck $N/test_gpu_queues random_rw > $R/san.tmp 2>&1; echo "racecheck random_rw rc=$? $(grep -E 'RACECHECK SUMMARY' $R/san.tmp)"; cat $R/san.tmp >> $R/sanitizers.log; rm -f $R/san.tmp
echo "=== Tier 2 bandwidth, 8 GiB, every word verified (cudaMemcpy the link's rate)"
timeout 60 $N/bench_gpu_bw -m memcpy -s 8G -r 2 -c 256M -H | tee $R/bw_memcpy.csv
for v in old new; do B=$N; [ $v = old ] && B=$O
  echo "$v"; timeout 100 $B/bench_gpu_bw -m emu -s 8G -r 2 -c 2M -w 4 -Q 2 -H | tee $R/bw_emu_$v.csv; done
date -u
