#!/bin/bash
# call 2: load_pretrained URI form with the volume cache; md one call (CLI without progress) against main
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R
log() { echo "[$(date -u +%T)] $*"; }
# the 8.5 GiB checkpoint image, in the background while the trees build
(PW=/tmp/pyload; mkdir -p $PW/root; timeout 300 python3 bench/hf_models.py make $PW/root --big-gib 8.5 >$R/make.log 2>&1
 SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
 mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img; echo mkfs rc=$? >>$R/make.log) &
MK=$!
OUT=$R PHASES="build" bash bench/coherence_gpu_run.sh 2>&1 | tail -3
(cmake -S abx/main -B build-main -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 >/dev/null && cmake --build build-main -j16 >$R/build-main.log 2>&1) || echo "MAIN BUILD FAILED"
log "main built"
OUT=$R PHASES="venv" bash bench/coherence_gpu_run.sh 2>&1 | tail -2
wait $MK; log "image: $(tail -1 $R/make.log)"
cat /tmp/pyload/ext4.img /tmp/pyload/root/big/*.safetensors >/dev/null
log "pyload"
timeout 200 python3 bench/hf_models.py bench emu:/tmp/pyload/ext4.img /big /tmp/pyload/root/big --repeat 3 2>$R/pyload.err | tee $R/pyload.jsonl | python3 -c '
import json,sys
for l in sys.stdin:
    d=json.loads(l)
    print(d.get("method", d), d.get("run",""), d.get("seconds",""), d.get("gbps",""))'
grep -i -m5 "error\|traceback" $R/pyload.err
log "md 4G: main and the change in turn"
M="read_mbps=14000&iops=2500000&latency_us=60"
for i in 1 2; do
	for t in main gpu; do
		env GPUNVME_EMU_PROFILE=1 MODEL="$M" OUT="$R/md-$t-$i" WORKDIR=/dev/shm/mdw MEMBERS="4:4" CHUNK=512 BUILD="$PWD/build-$t" SKIP_BUILD=1 TMPDIR=/dev/shm \
			timeout 120 bash bench/md_run.sh 4G >"$R/md-$t-$i.log" 2>&1
		log "md $t $i: $(tail -n 1 $R/md-$t-$i/summary.csv)"
	done
done
for wk in 2 6; do
	env GPUNVME_EMU_PROFILE=1 MODEL="$M" OUT="$R/md-w$wk" WORKDIR=/dev/shm/mdw MEMBERS="4:$wk" CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm \
		timeout 120 bash bench/md_run.sh 4G >"$R/md-w$wk.log" 2>&1
	log "md gpu workers $wk: $(tail -n 1 $R/md-w$wk/summary.csv)"
done
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
log done
