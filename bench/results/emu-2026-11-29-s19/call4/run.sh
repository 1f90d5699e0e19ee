#!/bin/bash
# call 4: which of workers and queue pairs moves load_pretrained, and what 12 of each do to the CLI and in process
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R
log() { echo "[$(date -u +%T)] $*"; }
(PW=/tmp/pyload; mkdir -p $PW/root; timeout 300 python3 bench/hf_models.py make $PW/root --big-gib 8.5 >$R/make.log 2>&1
 SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
 mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img; echo mkfs rc=$? >>$R/make.log) &
MK=$!
OUT=$R PHASES="build venv" bash bench/coherence_gpu_run.sh 2>&1 | grep -v '^tools\|^NVIDIA\|^cores\|^Sun' | tail -3
wait $MK; log "image: $(tail -1 $R/make.log)"
cat /tmp/pyload/ext4.img /tmp/pyload/root/big/*.safetensors >/dev/null
for v in "-/0" "workers=12/0" "-/12" "workers=12/12" "-/0" "workers=12/12" "inproc:-/0" "inproc:workers=12/12"; do
	env=(); w=$v; case $v in inproc:*) env=(GPUNVME_EMU_DMA=inproc); w=${v#inproc:};; esac
	q=${w%/*}; qs=${w##*/}; U=emu:/tmp/pyload/ext4.img; [ "$q" != - ] && U="$U?$q"
	qa=(); [ "$qs" != 0 ] && qa=(--queues $qs)
	env "${env[@]}" timeout 40 python3 bench/hf_models.py bench "$U" /big /tmp/pyload/root/big --repeat 3 --only-ours "${qa[@]}" 2>>$R/pyq.err | tee -a $R/pyq.jsonl |
		python3 -c '
import json,sys
r=[json.loads(l) for l in sys.stdin]
print(sys.argv[1], " ".join(str(d["gbps"]) for d in r if "gbps" in d))' "$v"
done
for v in "-/0" "workers=12/0" "workers=12/12" "-/0"; do
	q=${v%/*}; qs=${v##*/}; U=emu:/tmp/pyload/ext4.img; [ "$q" != - ] && U="$U?$q"
	qa=(); [ "$qs" != 0 ] && qa=(--queues $qs)
	t0=$(date +%s.%N)
	out=$(timeout 60 build-gpu/bin/gpunvme load "$U" /big --tier 2 --no-progress "${qa[@]}" 2>&1 | tail -1 | cut -c1-130)
	echo "cli $v $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }') s: $out"
done
grep -i -m5 "error\|traceback" $R/pyq.err
log done
