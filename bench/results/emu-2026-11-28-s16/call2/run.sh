# call 2 (session 16): wip/run-cut (= wip/moe-spans + runs cut at 256 MiB): the GPU suite; the cut A/B; md profile
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
( PW=/tmp/pyload; if [ ! -f $PW/ext4.img ]; then mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 4 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; fi; echo "IMG rc=$? $(date -u +%T)" ) > $OUT/img.log 2>&1 &
IMGP=$!
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
wait $IMGP; cat $OUT/img.log
st() { GPUNVME_LOAD_PROFILE=1 timeout 60 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 7000 > $OUT/stages-$1.jsonl 2> $OUT/stages-$1.err; echo "stages $1 rc=$?"; python3 -c "
import json,sys
for l in open(sys.argv[1]):
  r=json.loads(l); print(' round',r['round'],r['copies'],'s',r['s'],'gbps',r['gbps'],'pct',r['pct'],'load',r['stages']['load'],'load_pct',r['load_pct'],'select',r['stages']['select'])" $OUT/stages-$1.jsonl; grep -m2 "Error" $OUT/stages-$1.err; }
for rep in 1 2; do
GPUNVME_MODEL_RUN_MAX_MB=0 st cut0-$rep; GPUNVME_MODEL_RUN_MAX_MB=256 st cut256-$rep; GPUNVME_MODEL_RUN_MAX_MB=64 st cut64-$rep
done
GPUNVME_EMU_DMA=inproc GPUNVME_MODEL_RUN_MAX_MB=0 st inproc-cut0; GPUNVME_EMU_DMA=inproc st inproc-cut256
for c in 0 256; do GPUNVME_MODEL_RUN_MAX_MB=$c timeout 60 python3 bench/py_case.py /tmp/pyload/ext4.img /big modeled load_pretrained > $OUT/lp-cut$c.jsonl 2>$OUT/lp-cut$c.err; echo "load_pretrained modeled cut $c rc=$?"; cut -c1-200 $OUT/lp-cut$c.jsonl; done
echo "before j4: $(( $(date +%s) - T0 )) s"
STOP_ON_FAIL=1 OUT=$OUT PHASES="j4:1" timeout 330 bash bench/coherence_gpu_run.sh | grep -E "j4|Failed|\*\*\*"
L=$(( 585 - ($(date +%s) - T0) )); echo "md with ${L}s left"
if [ $L -gt 70 ]; then GPUNVME_EMU_PROFILE=1 OUT=$OUT/md WORKDIR=/dev/shm/mdw MEMBERS=4 CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout $L bash bench/md_run.sh 8G > $OUT/md.log 2>&1; echo "md rc=$?"; tail -1 $OUT/md/summary.csv; fi
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
