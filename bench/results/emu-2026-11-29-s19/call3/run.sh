#!/bin/bash
# call 3: the GPU suite under -j4 with the volume cache (and the strided tests' first GPU run); then
# load_pretrained with more workers and queue pairs
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R
log() { echo "[$(date -u +%T)] $*"; }
OUT=$R PHASES="build venv" bash bench/coherence_gpu_run.sh 2>&1 | grep -v '^tools\|^NVIDIA\|^cores\|^Sun' | tail -4
ln -sfn ../build-gpu/bin build/bin
(PW=/tmp/pyload; mkdir -p $PW/root; timeout 300 python3 bench/hf_models.py make $PW/root --big-gib 8.5 >$R/make.log 2>&1
 SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
 nice mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img; echo mkfs rc=$? >>$R/make.log) &
MK=$!
t0=$(date +%s)
(cd build-gpu && timeout 370 ctest -L gpu -j4 --output-on-failure >$R/ctest-j4.log 2>&1); rc=$?
log "ctest -L gpu -j4 rc=$rc $(( $(date +%s) - t0 )) s: $(grep -E 'tests passed' $R/ctest-j4.log)"
grep -E "\*\*\*|Failed  |Timeout" $R/ctest-j4.log | head -20
grep -E "gpu\.queues\.strided|gpu\.matrix" $R/ctest-j4.log | grep -E "Test +#" | head
wait $MK; log "image: $(tail -1 $R/make.log)"
cat /tmp/pyload/ext4.img /tmp/pyload/root/big/*.safetensors >/dev/null
for v in "-/0" "workers=12/12" "workers=16/16" "-/0"; do
	q=${v%/*}; qs=${v##*/}; U=emu:/tmp/pyload/ext4.img; [ "$q" != - ] && U="$U?$q"
	qa=(); [ "$qs" != 0 ] && qa=(--queues $qs)
	timeout 60 python3 bench/hf_models.py bench "$U" /big /tmp/pyload/root/big --repeat 3 --only-ours "${qa[@]}" 2>>$R/pyq.err | tee -a $R/pyq.jsonl |
		python3 -c '
import json,sys
r=[json.loads(l) for l in sys.stdin]
print(sys.argv[1], " ".join(str(d["gbps"]) for d in r if "gbps" in d))' "$v"
done
grep -i -m5 "error\|traceback" $R/pyq.err
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
log done
