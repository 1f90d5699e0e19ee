# call 1 (session 16): wip/moe-spans on the GPU; load_file's stages on the modeled SSD; md 512 KiB
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 4 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$? $(date -u +%T)" ) > $OUT/img.log 2>&1 &
IMGP=$!
OUT=$OUT PHASES="build venv" timeout 260 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cd build-gpu && timeout 150 ctest -R "gpu.moe|gpu.stream" --output-on-failure) > $OUT/moestream.log 2>&1; echo "moe+stream rc=$? $(( $(date +%s) - T0 )) s"; grep -E "tests passed|Failed|\*\*\*" $OUT/moestream.log | head -12
wait $IMGP; cat $OUT/img.log
for c in default inproc; do
  if [ $c = inproc ]; then export GPUNVME_EMU_DMA=inproc; else unset GPUNVME_EMU_DMA; fi
  GPUNVME_LOAD_PROFILE=1 timeout 60 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 7000 > $OUT/stages-$c.jsonl 2> $OUT/stages-$c.err; echo "stages $c rc=$?"; cut -c1-400 $OUT/stages-$c.jsonl; grep -m3 "profile\|Error" $OUT/stages-$c.err | cut -c1-250
done
unset GPUNVME_EMU_DMA
timeout 60 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 0 > $OUT/stages-plain.jsonl 2>$OUT/stages-plain.err; echo "stages plain rc=$?"; cut -c1-300 $OUT/stages-plain.jsonl
L=$(( 585 - ($(date +%s) - T0) )); echo "md with ${L}s left"
if [ $L -gt 60 ]; then OUT=$OUT/md WORKDIR=/dev/shm/mdw MEMBERS=4 CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout $L bash bench/md_run.sh 8G > $OUT/md.log 2>&1; echo "md rc=$?"; cat $OUT/md/summary.csv; fi
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
