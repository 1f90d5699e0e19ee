#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Same-run A/B after the review mends (bench/results/gpu-2026-11-22/review-mends):
# this tree against 7f11dd0 (git archive --format=tar -o head-snapshot.tar 7f11dd0),
# bench_gpu_qd1 on the modeled SSD and bench_gpu_iops at 12 workers x 48 queues,
# alternating, three rounds. OUT=DIR COMMIT=... bash bench/gpu_review_ab.sh
R=$OUT/r; mkdir -p $R
exec > >(tee $R/run.log) 2>&1
echo "new ${COMMIT:-?} vs old 7f11dd0"; date -u
mkdir -p /tmp/old && tar xf head-snapshot.tar -C /tmp/old
b() { cmake -S $1 -B $1/bd -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $R/cmake-$2.log 2>&1 && cmake --build $1/bd -j16 --target bench_gpu_qd1 bench_gpu_iops > $R/build-$2.log 2>&1 || tail -20 $R/build-$2.log; }
b . new & p1=$!; b /tmp/old old & p2=$!; wait $p1 $p2
M="latency_us=80&read_mbps=7000&iops=1000000&mdts=8"
for i in 1 2 3; do for v in old new; do B=bd/bin; [ $v = old ] && B=/tmp/old/bd/bin
  echo "$v $($B/bench_gpu_qd1 -n 2000 -u "$M" 2>&1 | grep 'lib gpunvme_dev_rw')"
  echo "$v,$(timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 32 -m 1)"
  echo "$v,$(timeout 60 $B/bench_gpu_iops -w 12 -q 48 -d 1024 -t 65536 -n 16 -m 0)"
done; done | tee $R/ab.txt
date -u
tar czf $OUT/r.tgz -C $OUT r
