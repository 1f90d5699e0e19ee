#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 30 on the GPU machine: where features meet.
#   OUT=/dir PHASES="build serial j4:3 tcp py" bash bench/coherence_gpu_run.sh
# Phases (in the order given):
#   build     Release, sm_90, into $BD (default build-gpu/, git-ignored: kept between calls on a
#             warm machine; one per GPU when several loops run at once, as
#             tests write under their build directory)
#   serial    ctest -L gpu, one test at a time (the baseline: all pass alone)
#   j4:N      ctest -L gpu -j4, N runs in a row (none started after
#             DEADLINE - RUN_S, epoch seconds, when set); each run's result, load
#             average and, on failure, the failed tests' output under $OUT
#             (STOP_ON_FAIL=1: no run after a failed one)
#   mp:N      the multi-process test alone (gpu.multiproc), N runs
#   moe       the GPU expert cache's tests: ctest -R gpu.moe, and
#             python/tests/test_gpu_moe.py (after venv)
#   tcp       the GPU path over NVMe/TCP against the fake target on
#             loopback: load --tier cpu|1 --verify, perf --gpu at QD1, QD32,
#             4x32 128 KiB against the CPU path's perf on the same target
#   burn:N    N busy loops from here on (CPU starvation); unburn stops them
#   moebench  bench/moe_bench.py --small for both model kinds (a smoke run of every row)
#   moefull:K bench/moe_bench.py for kind K (mixtral, finegrained), every row, ssd and ram, with
#             a trace of one decode step of (a)
#   moeskew:K the same model with a skewed router: rows e, a, b on the modeled SSD
#   emufile   issue 32: gpunvme load of a SIZE (8G) model from an image file at Tier 2, image
#             reads by pread against from the mapping (GPUNVME_EMU_FILE_READ), in-process and
#             through the DMA process (bench/emu_dma_diag.sh PHASES=load)
#   pyload    issue 32: load_pretrained of a PY_GIB (8.5) save_pretrained checkpoint from an image
#             file against load_file and from_pretrained, MERGE ("default 0") each, and its
#             breakdown (after venv); PYQ lists device-string variants (bench/emu_dma_diag.sh's V)
#   modeled   issue 32, acceptance 2: bench/modeled_ssd.py on pyload's image (made here when
#             missing; the CLI, load_file per shard, load_pretrained against a modeled 7 GB/s SSD);
#             after venv
#   stages    issue 32, acceptance 2: bench/shard_stages.py on pyload's image behind the modeled
#             7 GB/s SSD, the emulator's copies through the DMA process and in process, each with
#             steps sized by rate and fixed (STEPS, "0 64 1024" MiB), with the load and emulator
#             profiles (stages-*.jsonl, stages-*.err); after venv
#   wbmd      issue 32: md RAID0 of 4 modeled Gen5 members, 512 KiB chunks (bench/md_run.sh,
#             MD_SIZE 8G), per-lane waits then warp batches (GPUNVME_GPU_WARP_BATCH), the same array;
#             the whole GPU suite with warp batches is `GPUNVME_GPU_WARP_BATCH=1 PHASES=j4:1`
#   md2d      issue 32, acceptance 5: md 4 x Gen5 at 512 KiB chunks (bench/md_run.sh, MD_SIZE 16G), the
#             emulator's 2D copies on and off in turn (MD2D_RUNS pairs), rows per 2D copy from the
#             profile; then ctest -R "gpu.queues.strided|gpu.md"
#   pollab    issue 32, acceptance 5: the warps' CQ probe on and off (one tree, two builds), md 4 x Gen5
#             at 512 KiB (MD_SIZE 4G) with each in turn, POLL_RUNS (2) rounds; then the queue, md and
#             loader GPU tests on the probe's build
#   multi2    issue 32, acceptance 4, on two GPUs: bench/multi_gpu.py on pyload's checkpoint
#             (one GPU, two with their own controllers, placement layers and split, safetensors;
#             MGROWS: the rows, MGPROF: a row to profile once more, into multi2.err)
#   edges     issue 32: split's edge blocks on one GPU, bounced / GPUNVME_LOAD_EDGES=direct / none
#             (bench/split_select.py against layers, SEREP rounds); after venv
#   pystages  issue 32: load_pretrained's stages in a fresh process (bench/py_stages.py), DMA
#             process or not, eager or lazy module loading (PSV: the environments, "defaults"
#             for none), the DMA process's start from the emulator's profile; after venv
#   stream32  issue 32: bench/stream_llm_run.sh on the image at Tier 2 (modeled SSD), ref and ssd,
#             SROUNDS (1) rounds of ssd, SWINDOW slots (default: stream_decoder's)
#   open64    issue 32: the same small model from a 1 GiB and a 64 GiB image, start to exit
#   workers   issue 32: the emulator's workers WLIST ("8 12 16") in turn, WREP (2) rounds: load_pretrained
#             into a Volume through the DMA process and in process, and gpunvme load; after venv
#   soakbg:S  issue 32: bench/stream_soak.py for S seconds in the background (outlives the call
#             on a warm machine); soakget copies its result under $OUT
#   pack      everything under $OUT but run.log into one archive (8 files come back at most)
#   pyt       test_stream, test_md, test_gpu_moe with the package venv installed
#   venv      $BD/pyvenv/bin/python for gpu.matrix: the machine's python3
#             with the Python package built with CUDA for sm_90
#   py        the Python package (pip install, CUDA) and its GPU tests:
#             test_multi (two GPUs where there are two), test_md (the
#             stream on every md fixture, Tier 1/2), test_stream
# Everything is bounded by timeouts so one call fits 10 minutes.
R=${OUT:?set OUT}
mkdir -p "$R"
exec > >(tee -a "$R/run.log") 2>&1
log() { echo "[$(date -u +%T)] $*"; }
{ git log -1 --format="%h %s" 2>/dev/null; echo "tools: $(command -v zstd mkfs.ext4 python3 | tr "\n" " ")"; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u; echo "cores $(nproc), kernel $(uname -r)"; } | tee "$R/machine.txt"
BD=${BD:-build-gpu}
B=$BD/bin
# the PY_GIB (8.5) save_pretrained checkpoint in an ext4 image under
# /tmp/pyload (made once per machine), page cache warmed
py_image() {
	local PW=/tmp/pyload
	if [ ! -f $PW/ext4.img ]; then
		mkdir -p $PW/root
		timeout 300 python3 bench/hf_models.py make $PW/root --big-gib "${PY_GIB:-8.5}" 2>"$R/pyload-make.err" | tail -2
		SZ=$(du -sb $PW/root | cut -f1)
		truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
		mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img || { echo "mkfs failed"; rm -f $PW/ext4.img; return 1; }
	fi
	cat $PW/ext4.img $PW/root/big/*.safetensors >/dev/null
}
for ph in ${PHASES:-build serial}; do
	case $ph in
	build)
		log "build"
		cmake -S . -B "$BD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >"$R/cmake.log" 2>&1 &&
			cmake --build "$BD" -j"$(nproc)" >"$R/build.log" 2>&1 || { echo "BUILD FAILED"; tail -40 "$R/build.log"; exit 1; }
		log "built"
		;;
	serial)
		log "ctest -L gpu (serial)"
		(cd "$BD" && timeout 500 ctest -L gpu --output-on-failure >"$R/ctest-serial.log" 2>&1)
		grep -E "tests passed|\*\*\*|Total Test time" "$R/ctest-serial.log"
		;;
	j4:* | mp:*)
		n=${ph#*:}
		sel=(-L gpu -j4)
		[ "${ph%%:*}" = mp ] && sel=(-R '^gpu\.multiproc$')
		pass=0
		for i in $(seq "$n"); do
			t0=$(date +%s)
			# DEADLINE (epoch s): no run is started that could not end by then
			if [ -n "${DEADLINE:-}" ] && [ $((t0 + ${RUN_S:-120})) -gt "$DEADLINE" ]; then
				log "${ph%%:*}: deadline: $((i - 1)) runs started"
				break
			fi
			# GPUNVME_EMU_ERRORS=1: a data transfer error from the emulator
			# says its cause in the failed test's output (docs/emulator.md;
			# session 20's call 3 had two with no cause to read)
			(cd "$BD" && GPUNVME_EMU_ERRORS=1 timeout 400 ctest "${sel[@]}" --output-on-failure \
				>"$R/ctest-${ph%%:*}-$i.log" 2>&1)
			rc=$?
			res=$(grep -E "tests passed" "$R/ctest-${ph%%:*}-$i.log")
			log "${ph%%:*} run $i: rc $rc, $res, $(( $(date +%s) - t0 )) s, load $(cut -d' ' -f1-3 /proc/loadavg)"
			# a run counts only when ctest says every test passed (a
			# missing build directory must not read as a pass)
			if [ $rc -eq 0 ] && [[ $res == *"100% tests passed"* ]]; then
				pass=$((pass + 1))
				# each test's line (passed, skipped, time) stays: a
				# record can then say which ran, not only how many
				grep -E "Test +#|did not run|Skipped" "$R/ctest-${ph%%:*}-$i.log" >"$R/ctest-${ph%%:*}-$i.tests"
				rm -f "$R/ctest-${ph%%:*}-$i.log"
			else
				grep -E "\*\*\*|Failed|Timeout" "$R/ctest-${ph%%:*}-$i.log" | head -20
				# STOP_ON_FAIL=1: a streak is broken; spend no more device
				# time on it before the failure is understood
				[ "${STOP_ON_FAIL:-0}" = 1 ] && { log "${ph%%:*}: stopped at the first failure"; break; }
			fi
		done
		log "${ph%%:*}: $pass of $n runs passed"
		;;
	moe)
		# the GPU expert cache's tests alone (they run in -L gpu too)
		log "ctest -R gpu.moe"
		(cd "$BD" && timeout 400 ctest -R '^gpu\.moe\.' --output-on-failure >"$R/ctest-moe.log" 2>&1)
		grep -E "tests passed|\*\*\*|tier [12]:|FAIL" "$R/ctest-moe.log" | head -20
		# and from Python (after venv: the package built with CUDA)
		# GPUNVME_BUILD: the tests' gpunvme-fake-target (NVMe/TCP) is in $BD
		(cd python && GPUNVME_BUILD=$PWD/../$BD timeout 300 python3 -m pytest -q -rs tests/test_gpu_moe.py \
			tests/test_gpu_hf_moe.py >"$R/pytest-moe.log" 2>&1)
		echo "pytest test_gpu_moe rc=$?: $(tail -n 1 "$R/pytest-moe.log")"
		;;
	tcp)
		log "NVMe/TCP: GPU path vs CPU path, fake target on loopback"
		W=$(mktemp -d /tmp/tcpgpu.XXXXXX)
		mkdir -p "$W/tree/models"
		$B/gpunvme-mkmodel --format safetensors --size 1G --seed 3 -o "$W/tree/models/m.safetensors" >/dev/null
		truncate -s 1600M "$W/fs.img" && mkfs.ext4 -q -F -d "$W/tree" "$W/fs.img" || { echo "mkfs failed"; continue; }
		mkfifo "$W/in"
		$B/gpunvme-fake-target --image "$W/fs.img" <"$W/in" >"$W/ft.out" 2>"$W/ft.err" &
		FT=$!
		exec 9>"$W/in"
		for _ in $(seq 50); do [ -s "$W/ft.out" ] && break; sleep 0.1; done
		PORT=$(awk '{print $2}' "$W/ft.out")
		U="tcp://127.0.0.1:$PORT/nqn.2026-11.io.gpunvme:fake"
		{
			for t in cpu 1; do
				echo "--- load --tier $t --verify"
				timeout 120 $B/gpunvme load "$U" /models/m.safetensors --tier $t --verify --no-progress 2>&1 | tail -3
				echo "rc ${PIPESTATUS[0]}"
			done
			for q in 1 32; do
				echo "--- cpu qd$q 4K randread"; timeout 30 $B/gpunvme perf "$U" -q $q -o 4K -w randread -t 5 | tail -1
				echo "--- gpu qd$q 4K randread (thread mode, tier 1)"; timeout 30 $B/gpunvme perf "$U" -q $q -o 4K -w randread -t 5 --gpu --gpu-mode thread --tier 1 2>&1 | tail -2
			done
			echo "--- cpu 4x32 128K read"; timeout 30 $B/gpunvme perf "$U" -Q 4 -q 32 -o 128K -w read -t 5 | tail -1
			echo "--- gpu 4x32 128K read (tier 1)"; timeout 30 $B/gpunvme perf "$U" -Q 4 -q 32 -o 128K -w read -t 5 --gpu --tier 1 2>&1 | tail -2
		} 2>&1 | tee "$R/tcp.txt"
		exec 9>&-
		kill $FT 2>/dev/null
		wait $FT 2>/dev/null
		rm -rf "$W"
		;;
	moebench)
		# issue 33's benchmark on tiny models: every row runs (bench/moe_bench.py)
		log "moe_bench --small (mixtral, finegrained)"
		for k in mixtral finegrained; do
			timeout 300 python3 bench/moe_bench.py --kind $k --small --work /tmp/moebench --out "$R/moebench" \
				--media ssd --tokens 4 2>&1 | tail -12
		done
		;;
	moefull:* | moeskew:*)
		k=${ph#*:}
		extra=(--trace)
		[ "${ph%%:*}" = moeskew ] && extra=(--skew --rows e,a,b --media ssd)
		log "moe_bench $k ${extra[*]}"
		PYTHONUNBUFFERED=1 timeout "${MOE_S:-540}" python3 bench/moe_bench.py --kind "$k" --work /tmp/moebench \
			--out "$R/moebench" --tokens 16 "${extra[@]}" 2>&1 | grep -v "Loading weights\|Writing model" | tail -16
		# acceptance 4: no host wait between a layer's router and its reads
		[ "${ph%%:*}" = moefull ] && python3 bench/moe_trace_check.py "$R/moebench/trace-$k-ssd.json" | tail -8
		;;
	emufile)
		# issue 32: gpunvme load of an ${SIZE:-8G} model from an image file at
		# Tier 2, image reads by pread against from the mapping, in-process
		# and through the DMA process (bench/emu_dma_diag.sh)
		log "emu_dma_diag load ${SIZE:-8G}"
		OUT="$R/emufile" BD="$BD" SIZE=${SIZE:-8G} PHASES=load timeout 500 bash bench/emu_dma_diag.sh | grep -E "load |pvm |prof: |done"
		;;
	pyload)
		# issue 32, acceptance 1: load_pretrained of a save_pretrained
		# checkpoint (PY_GIB, 8.5) from an ext4 image, the default URI (no
		# snapshot), page cache warm, against safetensors load_file and
		# from_pretrained in the same process (bench/hf_models.py bench),
		# staged copies merged (default) and piece by piece, then where
		# load_pretrained's time goes (breakdown). After venv.
		log "pyload ${PY_GIB:-8.5} GiB"
		PW=/tmp/pyload
		py_image || continue
		# PYQ: device-string variants as QUERY/QUEUES ("-" = none, "," for
		# "&", QUEUES 0 = the default), as emu_dma_diag.sh's V; the first
		# runs against load_file and from_pretrained, the rest ours alone
		only=()
		for var in ${PYQ:--/0}; do
			q=${var%/*}
			qa=()
			[ "${var##*/}" != 0 ] && [ "$var" != "$q" ] && qa=(--queues "${var##*/}")
			U="emu:$PW/ext4.img"
			[ "$q" != - ] && U="$U?$(echo "$q" | tr , '&')"
			for mg in ${MERGE:-default 0}; do
				[ "$mg" = default ] && mg=
				GPUNVME_EMU_STAGE_MERGE=$mg timeout 240 python3 bench/hf_models.py bench "$U" /big $PW/root/big \
					--repeat "${PYREP:-2}" "${only[@]}" "${qa[@]}" 2>>"$R/pyload.err" | sed "s/^/q=$q merge=${mg:-default} /" | tee -a "$R/pyload.jsonl" | cut -c1-200
			done
			timeout 120 python3 bench/hf_models.py breakdown "$U" /big "${qa[@]}" 2>>"$R/pyload.err" | sed "s/^/q=$q /" | tee -a "$R/pyload.jsonl"
			only=(--only-ours)
		done
		grep -i -m5 "error\|traceback" "$R/pyload.err"
		;;
	modeled)
		log "modeled 7 GB/s SSD: every entry point"
		py_image || continue
		timeout 300 python3 bench/modeled_ssd.py /tmp/pyload/ext4.img /big --cli "$B/gpunvme" 2>"$R/modeled.err" |
			tee "$R/modeled.jsonl" | cut -c1-220
		grep -i -m5 "error\|traceback" "$R/modeled.err"
		;;
	stages)
		log "load_file stage by stage on the modeled SSD: copy modes x step sizes"
		py_image || continue
		for dma in process inproc; do
			for st in ${STEPS:-0 64 1024}; do
				f="$R/stages-$dma-$st"
				GPUNVME_EMU_DMA=$dma GPUNVME_LOAD_STEP_MB=$([ "$st" = 0 ] || echo "$st") GPUNVME_LOAD_PROFILE=1 \
					GPUNVME_EMU_PROFILE=1 timeout 90 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 7000 \
					>"$f.jsonl" 2>"$f.err"
				echo "$dma step $st: $(python3 -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1])][1:]
print(" ".join("%s%% (load %s%%)" % (x["pct"], x["load_pct"]) for x in r))' "$f.jsonl" 2>&1)"
			done
		done
		;;
	wbmd)
		log "md, 4 x Gen5, 512 KiB chunks: per-lane waits, then warp batches"
		for wb in 0 1; do
			GPUNVME_GPU_WARP_BATCH=$wb OUT="$R/md-wb$wb" WORKDIR=/dev/shm/mdw MEMBERS=4 CHUNK=512 BUILD="$PWD/$BD" \
				SKIP_BUILD=1 TMPDIR=/dev/shm timeout 280 bash bench/md_run.sh "${MD_SIZE:-8G}" >/dev/null 2>&1
			# the summary's header alone: the run ended before its load
			if [ "$(wc -l <"$R/md-wb$wb/summary.csv" 2>/dev/null || echo 0)" -ge 2 ]; then
				echo "warp batches $wb: $(tail -n 1 "$R/md-wb$wb/summary.csv")"
			else
				echo "warp batches $wb: FAILED, no load in the summary (see $R/md-wb$wb/md_run.log)"
			fi
		done
		;;
	md2d)
		# issue 32, acceptance 5: md RAID0 of 4 modeled Gen5 members at
		# 512 KiB chunks (MD_SIZE, 16G: the size of the 2 MiB-chunk record), one array, the 2D copies on and off
		# (GPUNVME_EMU_2D=0) in turn, MD2D_RUNS (2) pairs, with the
		# emulator's profile (rows per 2D copy: its lane lines); then the
		# strided-segment GPU tests
		log "md2d: 4 x Gen5, 512 KiB chunks, 2D copies on and off"
		M="read_mbps=14000&iops=2500000&latency_us=60"
		for i in $(seq "${MD2D_RUNS:-2}"); do
			for v in 1 0; do
				env GPUNVME_EMU_2D=$v GPUNVME_EMU_PROFILE=1 MODEL="$M" OUT="$R/md2d-$v-$i" WORKDIR=/dev/shm/mdw \
					MEMBERS="4:4" CHUNK=512 BUILD="$PWD/$BD" SKIP_BUILD=1 TMPDIR=/dev/shm \
					timeout 300 bash bench/md_run.sh "${MD_SIZE:-16G}" >"$R/md2d-$v-$i.log" 2>&1
				echo "2D $v run $i rc=$?: $(tail -n 1 "$R/md2d-$v-$i/summary.csv" 2>/dev/null)"
				f=$(ls "$R/md2d-$v-$i"/load-*.err 2>/dev/null | head -1)
				[ -n "$f" ] && grep -h "copies here" "$f" | awk '{c += $5; d += $8; r += $8 * substr($12, 2)} END { if (c) printf "  copies %d, 2D %d, rows a 2D copy %.1f\n", c, d, d ? r / d : 0 }'
			done
		done
		(cd "$BD" && timeout 200 ctest -R "gpu.queues.strided|gpu.md" --output-on-failure >"$R/md2d-ctest.log" 2>&1)
		echo "strided and md GPU tests rc=$?: $(grep -E "tests passed" "$R/md2d-ctest.log")"
		;;
	pollab)
		# issue 32, acceptance 5: the warp waits' CQ probe (device.cuh,
		# GPUNVME_WARP_PROBE_NS) on and off, one tree built both ways ($BD
		# as built, and $BD-off with the probe never taken), md 4 x Gen5 at
		# 512 KiB chunks (MD_SIZE, 4G) with each in turn, POLL_RUNS (2) rounds
		log "pollab: the warps' CQ probe on and off, md 4 x Gen5 at 512 KiB"
		cmake -S . -B "$BD-off" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
			-DCMAKE_CUDA_FLAGS="-DGPUNVME_WARP_PROBE_NS=0xffffffffu" >"$R/cmake-off.log" 2>&1 &&
			cmake --build "$BD-off" -j"$(nproc)" >"$R/build-off.log" 2>&1 || { echo "BUILD (off) FAILED"; tail -20 "$R/build-off.log"; continue; }
		M="read_mbps=14000&iops=2500000&latency_us=60"
		for i in $(seq "${POLL_RUNS:-2}"); do
			for v in off probe; do
				bd=$BD
				[ $v = off ] && bd=$BD-off
				env MODEL="$M" OUT="$R/poll-$v-$i" WORKDIR=/dev/shm/mdw MEMBERS="4:4" CHUNK=512 BUILD="$PWD/$bd" \
					SKIP_BUILD=1 TMPDIR=/dev/shm timeout 300 bash bench/md_run.sh "${MD_SIZE:-4G}" >"$R/poll-$v-$i.log" 2>&1
				echo "$v run $i rc=$?: $(tail -n 1 "$R/poll-$v-$i/summary.csv" 2>/dev/null)"
			done
		done
		# POLL_CTEST=0: no tests (a -j4 run in the same call has them)
		if [ "${POLL_CTEST:-1}" = 1 ]; then
			(cd "$BD" && timeout 240 ctest -R "gpu.queues|gpu.md|gpu.loader" --output-on-failure >"$R/pollab-ctest.log" 2>&1)
			echo "queue, md and loader GPU tests (probe) rc=$?: $(grep -E "tests passed" "$R/pollab-ctest.log")"
		fi
		;;
	multi2)
		# issue 32, acceptance 4 (two GPUs: nvidia-h200-x2): one GPU against
		# two fed by their own controllers, placement split against layers,
		# safetensors beside them (bench/multi_gpu.py). After venv.
		log "multi2: two GPUs"
		# the GPUs' NUMA nodes and CPUs: the aggregate moved 1.94x -> 1.66x
		# between two calls (session 23); each byte crosses host memory three
		# times, so which socket holds the page cache and the workers may bind
		{ nvidia-smi topo -m; lscpu | grep -i numa; grep -i "^Node.*MemTotal" /sys/devices/system/node/node*/meminfo; } \
			>"$R/topo.txt" 2>&1
		py_image || continue
		timeout 400 python3 bench/multi_gpu.py emu:/tmp/pyload/ext4.img /big /tmp/pyload/root/big \
			--repeat "${PYREP:-3}" ${MGROWS:+--rows "$MGROWS"} ${MGPROF:+--profile "$MGPROF"} 2>"$R/multi2.err" | tee "$R/multi2.jsonl" | cut -c1-220
		grep -i -m5 "error\|traceback" "$R/multi2.err"
		;;
	edges)
		# issue 32, acceptance 4: placement split's edge blocks (session 23).
		# One GPU's share of a two-GPU split against layers'
		# (bench/split_select.py), SEREP (3) rounds each, three ways: edges
		# bounced (the default), landed by DMA in the runs' slack
		# (GPUNVME_LOAD_EDGES=direct), and none (--shrink: parts cut to
		# whole blocks, a diagnosis only). PY_GIB=4 makes a smaller
		# checkpoint when pyload's is not there yet. After venv.
		log "edges: split's edge blocks bounced, direct, none"
		py_image || continue
		for v in bounce direct shrink; do
			a=
			[ $v = shrink ] && a=--shrink
			echo "== $v"
			env GPUNVME_LOAD_EDGES=$([ $v = direct ] && echo direct || echo bounce) timeout 120 \
				python3 bench/split_select.py emu:/tmp/pyload/ext4.img /big --repeat "${SEREP:-3}" $a \
				2>"$R/edges-$v.err" | tee "$R/edges-$v.jsonl" | cut -c1-160
		done
		;;
	pystages)
		# issue 32, acceptance 1: where a fresh process's load_pretrained
		# time goes (bench/py_stages.py), with the DMA process (the default)
		# and in process, eager (the module's default) and lazy CUDA module
		# loading; the CLI's start-to-exit on the same checkpoint. After
		# pyload (its image) and venv.
		log "pystages"
		py_image || continue
		U=emu:/tmp/pyload/ext4.img
		for i in 1 2; do
			# PSV: the variants, each an environment ("defaults": none);
			# the stages runs with the emulator's profile, which says the
			# DMA process's start, its lanes' opens and its maps
			# (pystages.err); the e2e runs without it
			for v in ${PSV:-defaults GPUNVME_EMU_DMA=inproc CUDA_MODULE_LOADING=LAZY CUDA_MODULE_LOADING=EAGER}; do
				e=$v
				[ "$v" = defaults ] && e=
				for m in e2e stages; do
					p=
					[ $m = stages ] && p=GPUNVME_EMU_PROFILE=1
					echo "$v $(env $p $e timeout 120 python3 bench/py_stages.py $U /big $m 2>>"$R/pystages.err")"
				done
			done
			t0=$(date +%s.%N)
			out=$(timeout 120 $B/gpunvme load $U /big --tier 2 --no-progress 2>&1 | tail -1 | cut -c1-160)
			echo "cli $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s start to exit: $out"
		done | tee "$R/pystages.txt"
		grep -h "DMA process started\|lanes .* opened" "$R/pystages.err" | head -12
		grep -i -m5 "error\|traceback" "$R/pystages.err"
		;;
	stream32)
		# issue 32, acceptance 3: the layer stream on the emulator's Tier 2
		# from the image itself (no snapshot), modeled 7 GB/s SSD, a fresh
		# process per method, 40 layers, 8 tokens, 1.6 GiB budget (the
		# model is 2.98x it): ref and ssd (bench/stream_llm_run.sh). After venv.
		log "stream32"
		# the stream's trace (every layer's read and wait, host and GPU
		# times): what the first decode step after the prefill waits for
		# (its 46 ms beyond the steady state, session 17's record)
		# SROUNDS (1): rounds, each a fresh process for ssd (the model and
		# the reference are made in the first), each with its own trace;
		# SWINDOW: the stream's slots (default: stream_decoder's)
		for n in $(seq "${SROUNDS:-1}"); do
			if [ "$n" = 1 ]; then
				d="$R/stream32" st="model run" m="${SMETHODS:-ref,ssd}"
			else
				d="$R/stream32-$n" st=run m=ssd
			fi
			mkdir -p "$d"
			GPUNVME_STREAM_TRACE="$d/trace.txt" OUT="$d" STEPS="$st" METHODS="$m" WINDOW="${SWINDOW:-}" \
				EMUQ="nsq=64&mqes=1023" timeout "${STREAM_S:-300}" bash bench/stream_llm_run.sh 40 8 1.6 2>&1 | tail -6 | cut -c1-400
			# the trace by step (one streaming method, ssd, writes it):
			# where the reads stand idle (session 22: after layers 0 to
			# window - 1, until the host releases layer 0)
			python3 bench/stream_trace.py "$d/trace.txt" --layers 40 2>&1 | head -12
		done
		;;
	open64)
		# issue 32, acceptance 1: opening a 64 GiB image costs < 1 s with the
		# GPU in use. The same 64 MiB model in a 1 GiB and in a 64 GiB
		# (sparse) ext4 image, `gpunvme load --tier 2`, start to exit,
		# alternating: a cost in proportion to the image shows as the gap
		log "open64: the same small model in a 1 GiB and a 64 GiB image"
		OW=$(mktemp -d /tmp/open64.XXXXXX)
		mkdir -p "$OW/tree"
		$B/gpunvme-mkmodel --format safetensors --size 64M --seed 9 -o "$OW/tree/m.safetensors" >/dev/null
		for sz in 1G 64G; do
			truncate -s $sz "$OW/$sz.img" && mkfs.ext4 -q -F -d "$OW/tree" "$OW/$sz.img" || echo "mkfs $sz failed"
		done
		# "with the GPU in use": a torch process keeps the GPU busy with
		# matrix products throughout (GPU_BUSY=0: not)
		GB=
		if [ "${GPU_BUSY:-1}" = 1 ]; then
			timeout 120 python3 -c 'import torch, time
a = torch.randn(8192, 8192, device="cuda"); t = time.time()
while time.time() - t < 110:
    a = torch.tanh(a @ a); torch.cuda.synchronize()' 2>"$R/open64-busy.err" &
			GB=$!
			sleep 8
			log "open64: GPU busy: $(nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader)"
		fi
		for i in 1 2 3; do
			for sz in 1G 64G; do
				t0=$(date +%s.%N)
				out=$(timeout 60 $B/gpunvme load "emu:$OW/$sz.img" /m.safetensors --tier 2 --no-progress 2>&1 | tail -1 | cut -c1-120)
				log "open64 $sz $i: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s start to exit: $out"
			done
		done
		[ -n "$GB" ] && kill $GB 2>/dev/null
		rm -rf "$OW"
		;;
	workers)
		# issue 32, acceptance 1: the emulator's workers (the loader's
		# default queue count follows them, loader.c auto_queues), WLIST
		# ("8 12 16") in turn, WREP (2) rounds: load_pretrained into a
		# Volume through the DMA process (Python's default) and in process,
		# then gpunvme load (in process, the CLI's default), start to exit.
		# wip/workers12 makes 12 the DMA process's default on 16 CPUs.
		# After venv.
		log "workers: ${WLIST:-8 12 16}"
		py_image || continue
		for i in $(seq "${WREP:-2}"); do
			for w in ${WLIST:-8 12 16}; do
				U="emu:/tmp/pyload/ext4.img?workers=$w"
				for dma in process inproc; do
					echo "round $i py $dma workers=$w: $(GPUNVME_EMU_DMA=$dma timeout 60 python3 bench/hf_models.py bench "$U" \
						/big /tmp/pyload/root/big --repeat 3 --only-ours 2>>"$R/workers.err" | python3 -c 'import json, sys
print(" ".join(str(d["gbps"]) for d in map(json.loads, sys.stdin) if "gbps" in d))')"
				done
				t0=$(date +%s.%N)
				out=$(timeout 60 $B/gpunvme load "$U" /big --tier 2 --no-progress 2>&1 | tail -1 | cut -c1-140)
				echo "round $i cli workers=$w: $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s start to exit: $out"
			done
		done | tee "$R/workers.txt"
		grep -i -m5 "error\|traceback" "$R/workers.err"
		;;
	soakbg:*)
		# issue 32: the Tier 2 stream soak (bench/stream_soak.py) for N
		# seconds, in the background: it outlives this call on a warm
		# machine; soakget collects it
		log "stream soak ${ph#*:} s in the background"
		# setsid: its own session, so the end of this call's process
		# group does not take it down (a plain nohup'd child died with
		# the call on 2026-11-28, its log still empty); -u: the log is
		# written as it goes, so a run cut short still says how far it got
		rm -f /tmp/soak.json
		setsid nohup python3 -u bench/stream_soak.py --build "$BD" --work /tmp/soak --seconds "${ph#*:}" \
			--out /tmp/soak.json >/tmp/soak.log 2>&1 </dev/null &
		;;
	soakget)
		cp /tmp/soak.json /tmp/soak.log "$R/" 2>/dev/null
		log "stream soak: $(cat /tmp/soak.json 2>/dev/null || echo "not done: $(tail -2 /tmp/soak.log)")"
		;;
	pack)
		(cd "$R" && tar czf logs.tgz --exclude=run.log --exclude=logs.tgz --remove-files -- * 2>/dev/null)
		;;
	pyt)
		# the Python GPU tests that read Tier 2 behind blocking host
		# copies (no sync_reads), with the package venv installed
		log "python: stream, md and expert cache tests (installed package)"
		# GPUNVME_BUILD: the tests' gpunvme-fake-target is in $BD, not build/
		(cd python && GPUNVME_BUILD=$PWD/../$BD timeout 400 python3 -m pytest -q -rs tests/test_stream.py \
			tests/test_md.py tests/test_gpu_moe.py >"$R/pytest-t2.log" 2>&1)
		echo "pytest rc=$?: $(tail -n 1 "$R/pytest-t2.log")"
		grep -E "^(FAILED|ERROR)" "$R/pytest-t2.log" | head -20
		;;
	venv)
		# $BD/pyvenv/bin/python runs the machine's python3 (its venv has
		# torch and pytest; a venv made on top of it, or a link to its
		# python from elsewhere, would not see them), with this tree's
		# package installed into it (PIP=0: already installed)
		log "python for gpu.matrix"
		export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
		[ "${PIP:-1}" = 0 ] || python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python \
			>"$R/venv.log" 2>&1 || { echo "PIP FAILED"; tail -30 "$R/venv.log"; }
		mkdir -p "$BD/pyvenv/bin"
		printf '#!/bin/sh\nexec %s "$@"\n' "$(command -v python3)" >"$BD/pyvenv/bin/python"
		chmod +x "$BD/pyvenv/bin/python"
		(cd /tmp && "$OLDPWD/$BD/pyvenv/bin/python" -c 'import gpunvme, torch, pytest; print("gpunvme", gpunvme.__file__, "cuda", torch.cuda.is_available())')
		;;
	py)
		log "python: pip install (CUDA) and the GPU tests"
		export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
		python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python >"$R/pip.log" 2>&1 ||
			{ tail -30 "$R/pip.log"; continue; }
		(cd python && timeout 400 python3 -m pytest -q -rs tests/test_multi.py tests/test_md.py tests/test_stream.py \
			>"$R/pytest.log" 2>&1)
		echo "pytest rc=$?: $(tail -n 1 "$R/pytest.log")"
		grep -E "^(FAILED|ERROR)|test_two_gpus" "$R/pytest.log" | head -20
		;;
	burn:*)
		# CPU starvation: N busy loops beside what runs next (the issue's
		# failures came on a loaded machine)
		for _ in $(seq "${ph#burn:}"); do (while :; do :; done) & BURN="$BURN $!"; done
		log "burning ${ph#burn:} cores"
		;;
	unburn)
		[ -n "$BURN" ] && kill $BURN 2>/dev/null
		BURN=
		log "burners stopped"
		;;
	*) echo "unknown phase $ph" ;;
	esac
done
[ -n "$BURN" ] && kill $BURN 2>/dev/null
log "done"
