#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 14 on the GPU machine (no NVMe there): the CUDA half of Tier 2 on the
# kmod: bus, for real.
#   OUT=/some/dir bash bench/kmod_dmabuf_run.sh      (from the repo root)
# Writes under $OUT/kmod-dmabuf/:
#   machine.txt       GPU, driver (open or proprietary module), kernel, CUDA
#   probe.csv         dma-buf export of cudaMalloc'ed memory: sizes x offsets,
#                     CUresult, dma-buf size, exporter; device attributes
#   p2p.txt           whether nvidia_p2p_get_pages is exported (kallsyms)
#   build.log         the whole tree with CUDA (-Werror), incl. the kmod: CUDA
#                     path (src/cuda/gpu_queues.cu: export_dmabuf, 4 KiB tables)
#   ctest-gpu.log     the GPU tests (emulator) with the changed buffer tables
#   kmod-build.log    the kernel module against this kernel's headers, if
#                     installed (built only, never loaded)
# Bounded to fit one 10-minute call; needs nvcc, cmake, a CUDA GPU.
set -u
R=${OUT:?set OUT}/kmod-dmabuf
mkdir -p "$R"
exec > >(tee "$R/run.log") 2>&1
{
	git log -1 --format='tree %h %s' 2>/dev/null
	date -u
	nvidia-smi --query-gpu=name,driver_version,pci.bus_id --format=csv,noheader
	head -n 1 /proc/driver/nvidia/version 2>/dev/null || echo "no /proc/driver/nvidia/version"
	uname -r
	nvcc --version | tail -1
	nproc
} | tee "$R/machine.txt"

echo "=== dma-buf export probe"
ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
timeout 120 nvcc -O2 -arch=sm_"${ARCH:-90}" -o "$R/kmod_dmabuf_probe" bench/kmod_dmabuf_probe.cu &&
	timeout 120 "$R/kmod_dmabuf_probe" 0 | tee "$R/probe.csv"
echo "probe rc=${PIPESTATUS[0]}"

echo "=== nvidia_p2p symbols"
{
	for s in nvidia_p2p_get_pages nvidia_p2p_put_pages nvidia_p2p_dma_map_pages nvidia_p2p_free_page_table; do
		if grep -qw "$s" /proc/kallsyms 2>/dev/null; then echo "$s: exported ($(grep -w "$s" /proc/kallsyms | head -n 1 | awk '{print $2, $4}'))"
		else echo "$s: not found in /proc/kallsyms (not root, or nvidia.ko does not export it)"; fi
	done
	grep -w nvidia_p2p_get_pages /lib/modules/"$(uname -r)"/build/Module.symvers 2>/dev/null || true
} | tee "$R/p2p.txt"

echo "=== build with CUDA (warnings as errors)"
cmake -S . -B "$R/bd" -DCMAKE_BUILD_TYPE=Release -DGPUNVME_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="${ARCH:-90}" > "$R/cmake.log" 2>&1 &&
	timeout 400 cmake --build "$R/bd" -j"$(nproc)" > "$R/build.log" 2>&1
echo "build rc=$? ($(grep -c -E 'warning|error' "$R/build.log") warning/error lines)"
grep -E "gpu_queues.cu" "$R/build.log" | head -n 3

echo "=== GPU tests"
(cd "$R/bd" && timeout 200 ctest -L gpu > "$R/ctest-gpu.log" 2>&1; grep -E "tests passed|Failed|Not Run" "$R/ctest-gpu.log")

echo "=== kernel module against this kernel's headers (not loaded)"
if [ -f /lib/modules/"$(uname -r)"/build/Makefile ]; then
	timeout 120 scripts/kmod-build.sh /lib/modules/"$(uname -r)"/build "$R/kmod" > "$R/kmod-build.log" 2>&1
	echo "kmod build rc=$?"; tail -n 3 "$R/kmod-build.log"
else
	echo "no headers for $(uname -r): not built" | tee "$R/kmod-build.log"
fi
rm -rf "$R/bd" "$R/kmod"/*.o
date -u
