#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The device run behind bench/results/gpu-2026-11-22/qd1-protocol (issue 4,
# benchmark 3's QD1 goal): the GPU queue protocol of this tree ("new") side by
# side with a baseline commit ("old"), in one process group on one machine.
# Run from the repository root on a machine with a GPU:
#   git archive --format=tar -o head-snapshot.tar BASELINE_COMMIT
#   OUT=/some/dir COMMIT=$(git rev-parse --short HEAD) bash bench/gpu_protocol_run.sh
# The baseline gets bench/bench_gpu_qd1.cu (public device API only) copied in.
# Steps: GPU tests; bench_gpu_qd1 (null namespace 2x each, modeled SSD 3-4x
# new, 2x old, alternating); gpunvme perf QD1 from the CPU and from one GPU
# thread on the model; bench_gpu_iops old/new at 12 workers x 48 queues (warp
# and thread) and 4 workers x 1 queue; compute-sanitizer memcheck/racecheck;
# bench/gpu_model.sh; bench/gpu_iops.sh; bench/gpu_bw.sh --quick.
# Everything lands in $OUT/r and $OUT/r.tgz.
R=$OUT/r; mkdir -p $R
exec > >(tee $R/run.log) 2>&1
{ echo "commit ${COMMIT:-?}"; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader; date -u; nproc; lscpu | grep "Model name"; nvcc --version | tail -2; } | tee $R/machine.txt
build() { cmake -S $1 -B $1/bd -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $R/cmake-$2.log 2>&1 &&
  cmake --build $1/bd -j16 > $R/build-$2.log 2>&1 || { echo "BUILD $2 FAILED"; tail -30 $R/build-$2.log; }; }
if [ ! -x /tmp/old/bd/bin/bench_gpu_qd1 ]; then
  mkdir -p /tmp/old && tar xf head-snapshot.tar -C /tmp/old && cp bench/bench_gpu_qd1.cu bench/CMakeLists.txt /tmp/old/bench/
  build /tmp/old old & p2=$!
fi
build . new & p1=$!; wait $p1 ${p2:-}
date -u
N=bd/bin; O=/tmp/old/bd/bin
M="latency_us=80&read_mbps=7000&iops=1000000&mdts=8"
echo "=== GPU tests"; (cd bd && timeout 240 ctest -L gpu --output-on-failure > $R/ctest-gpu.log 2>&1; grep -E "tests passed|Failed" $R/ctest-gpu.log)
i=0; echo "=== qd1 null"; for v in old new old new; do i=$((i+1)); F=$R/qd1-null-$i-$v.txt; B=$N; [ $v = old ] && B=$O; $B/bench_gpu_qd1 -n 4000 > $F 2>&1; echo "$v $(grep 'lib gpunvme_dev_rw' $F)"; done
echo "=== qd1 model"; for v in new old new old new new; do i=$((i+1)); F=$R/qd1-model-$i-$v.txt; B=$N; [ $v = old ] && B=$O; $B/bench_gpu_qd1 -n 2000 -u "$M" > $F 2>&1; echo "$v $(grep 'lib gpunvme_dev_rw' $F)"; done
echo "=== perf --gpu qd1"; timeout 30 $N/gpunvme perf "emu:null:1T?lbads=12&workers=1&nsq=1&$M" -q 1 -o 4K -w randread --queues 1 -t 3 --gpu --gpu-mode thread 2>&1 | tail -3 | tee $R/perf_gpu_qd1.txt
echo "=== perf cpu qd1"; timeout 30 $N/gpunvme perf "emu:null:1T?lbads=12&workers=1&nsq=1&$M" -q 1 -o 4K -w randread --queues 1 -t 3 2>&1 | tail -2 | tee $R/perf_cpu_qd1.txt
echo "=== iops old/new"; for v in old new old new; do B=$N; [ $v = old ] && B=$O;
  echo -n "$v,"; timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 32 -m 1
  echo -n "$v,"; timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 16 -m 0
  echo -n "$v,"; timeout 60 $B/bench_gpu_iops -w 4 -q 1 -d 1024 -t 4096 -n 16 -m 0
done | tee $R/iops_old_new.csv
echo "=== sanitizers"; for c in many_threads lanes faults relaunch; do timeout 60 compute-sanitizer --tool memcheck bd/bin/test_gpu_queues $c > $R/memcheck-$c.log 2>&1; echo "memcheck $c rc=$? $(grep -E 'ERROR SUMMARY' $R/memcheck-$c.log)"; done
for c in random_rw lanes; do timeout 60 compute-sanitizer --tool racecheck bd/bin/test_gpu_queues $c > $R/racecheck-$c.log 2>&1; echo "racecheck $c rc=$? $(grep -E 'RACECHECK SUMMARY' $R/racecheck-$c.log)"; done
echo "=== gpu_model"; timeout 100 bash bench/gpu_model.sh bd 2>&1 | tee $R/gpu_model.txt | grep -E "^gpu|total"
echo "=== gpu_iops sweep"; timeout 200 bash bench/gpu_iops.sh bd > $R/gpu_iops.csv 2>&1; grep -E "^gpu,(thread|warp),12,48|^cpu" $R/gpu_iops.csv
echo "=== gpu_bw quick"; timeout 150 bash bench/gpu_bw.sh bd --quick $R/bw > $R/bw.log 2>&1; tail -n 7 $R/bw/gpu_bw.md 2>/dev/null || tail -n 5 $R/bw.log
date -u
tar czf $OUT/r.tgz -C $OUT r
