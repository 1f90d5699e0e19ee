#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# On the GPU machine: build with CUDA, run the GPU tests (ctest -L gpu, the
# queue recovery cases among them) and the GPU fault soak for SOAK_SECONDS.
#   OUT=/tmp/o SOAK_SECONDS=300 bash bench/gpu_reliability_run.sh
# Logs under $OUT: build.log, ctest-gpu.log, soak-gpu.log, nvidia-smi.txt.
set -u
OUT=${OUT:?set OUT to a directory for the logs}
SOAK_SECONDS=${SOAK_SECONDS:-300}
SEED=${SEED:-7}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
date -u > "$OUT/date.txt"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
B=${BUILD:-build-gpu}
{ cmake -S . -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 &&
  cmake --build "$B" -j "$(nproc)"; } > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
(cd "$B" && ctest --output-on-failure -L gpu -E soak) > "$OUT/ctest-gpu.log" 2>&1
echo "ctest -L gpu: rc $?"; tail -5 "$OUT/ctest-gpu.log"
"$B/bin/test_gpu_queues" recover > "$OUT/recover.log" 2>&1; echo "recover: rc $?"; cat "$OUT/recover.log"
"$B/bin/soak_gpu" --seconds "$SOAK_SECONDS" --seed "$SEED" > "$OUT/soak-gpu.log" 2>&1
echo "soak_gpu: rc $?"; tail -25 "$OUT/soak-gpu.log"
