#!/bin/bash
# call 4 (session 20): call 3's two -j4 failures (NVMe status 0x4004 from the emulator) reproduced and told
# apart: wip/s20 + GPUNVME_EMU_ERRORS=1 (each data transfer error's cause on stderr); the queue, loader and
# soak GPU tests under -j4 with the warp probe (build-gpu) and without (build-off), in turn; the matrix's
# md RAID0 x4 Tier 2 cells (DMA process, default workers)
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R; T0=$(date +%s)
log() { echo "[$(date -u +%T) +$(( $(date +%s) - T0 ))s] $*"; }
echo "tree: wip/s20 + emu errors diag"
OUT=$R PHASES="build venv" bash bench/coherence_gpu_run.sh 2>&1 | tail -2
cmake -S . -B build-off -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
	-DCMAKE_CUDA_FLAGS=-DGPUNVME_WARP_PROBE_NS=0xffffffffu >$R/cmake-off.log 2>&1 &&
	cmake --build build-off -j16 >$R/build-off.log 2>&1 || echo "build off FAILED"
log built
export GPUNVME_EMU_ERRORS=1
for i in 1 2 3; do
	for b in gpu off; do
		[ $(( $(date +%s) - T0 )) -gt 400 ] && break 2
		ln -sfn ../build-$b/bin build/bin
		(cd build-$b && timeout 120 ctest -R "gpu.loader|gpu.queues|gpu.soak" -j4 --output-on-failure >$R/lq-$b-$i.log 2>&1)
		log "$b round $i: rc=$? $(grep -E 'tests passed' $R/lq-$b-$i.log) $(grep -E '\*\*\*Failed|Timeout' $R/lq-$b-$i.log | awk '{print $4}' | tr '\n' ' ')"
		grep -h "data transfer error (lane\|0x4004" $R/lq-$b-$i.log | sort | uniq -c | head -5
	done
	[ $(( $(date +%s) - T0 )) -gt 430 ] && break
	(cd python/tests && GPUNVME_MATRIX_GPU=1 GPUNVME_BUILD=$PWD/../../build-gpu timeout 90 python3 -m pytest -q -p no:cacheprovider \
		test_matrix.py -k "x4 and tier2" >$R/mx-$i.log 2>&1)
	log "matrix x4 tier2 round $i: rc=$? $(tail -1 $R/mx-$i.log)"
	grep -h "data transfer error (lane\|0x4004" $R/mx-$i.log | sort | uniq -c | head -5
done
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
log done
