#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Build on a GPU machine and run the GPU tests, plain and under
# compute-sanitizer (memcheck, racecheck). Logs go to $OUT (default ./gpu-out).
#   GPU_TESTS="test_gpu_emu"   which binaries go under compute-sanitizer
set -uo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	nvcc --version | tail -n 2
	nproc
} > "$OUT/machine.txt" 2>&1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGPUNVME_CUDA=ON \
	-DCMAKE_CUDA_ARCHITECTURES=native > "$OUT/configure.log" 2>&1 || { tail -n 30 "$OUT/configure.log"; exit 1; }
cmake --build build-gpu -j "$(nproc)" > "$OUT/build.log" 2>&1 || { grep -E "error" "$OUT/build.log" | head -30; exit 1; }
rc=0
(cd build-gpu && ctest --output-on-failure -L gpu) > "$OUT/ctest-gpu.log" 2>&1 || rc=1
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
for spec in ${SANITIZE_RUNS:-test_gpu_emu test_gpu_queues:faults test_gpu_queues:relaunch}; do
	t=${spec%%:*}
	arg=${spec#*:}
	[ "$arg" = "$spec" ] && arg=
	for tool in memcheck racecheck; do
		"$CS" --tool "$tool" --error-exitcode 3 "build-gpu/bin/$t" $arg > "$OUT/$t${arg:+.$arg}.$tool.log" 2>&1 || rc=1
	done
done
cat "$OUT/machine.txt"
grep -E "PASS|FAIL|ok|Passed|Failed|tests passed" "$OUT/ctest-gpu.log" | tail -n 30
grep -H -E "ERROR SUMMARY|RACECHECK SUMMARY|^FAIL" "$OUT"/*.log
exit $rc
