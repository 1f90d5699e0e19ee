# call 1 (session 18): lanes micro-bench (md's copy pattern); load_pretrained 8.5 GiB from the image with workers/staging variants
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 8.5 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$? $(date -u +%T)" ) > $OUT/img.log 2>&1 &
IMGP=$!
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
wait $IMGP; cat $OUT/img.log; echo "image at $(( $(date +%s) - T0 )) s"
timeout 150 build-gpu/bin/bench_gpu_bw -m lanes -s 4G -c 512K,2M -w 4,16 -d 32 -H > $OUT/lanes.txt 2>&1; echo "lanes rc=$?"; cat $OUT/lanes.txt | cut -c1-200
timeout 60 build-gpu/bin/bench_gpu_bw -m lanes -s 4G -c 512K -w 16 -d 4 > $OUT/lanes-d4.txt 2>&1; cat $OUT/lanes-d4.txt | cut -c1-200
echo "lanes done $(( $(date +%s) - T0 )) s"
PYQ="-/0 workers=12/0 workers=16/0" MERGE=default OUT=$OUT PHASES="pyload" timeout 300 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} " | grep -v '"run": 0' | cut -c1-210
echo "pyload done $(( $(date +%s) - T0 )) s"
U=emu:/tmp/pyload/ext4.img
for v in "GPUNVME_EMU_DMA_STAGE_MB=16 W=12" "GPUNVME_EMU_DMA=inproc W=8" "GPUNVME_EMU_DMA=inproc W=16"; do
  L=$(( 560 - ($(date +%s) - T0) )); [ $L -lt 40 ] && break
  w=${v##*W=}; e=${v% W=*}
  env $e GPUNVME_EMU_PROFILE=1 timeout 60 python3 bench/hf_models.py bench "$U?workers=$w" /big /tmp/pyload/root/big --repeat 3 --only-ours 2>$OUT/var-$w-${e//[^A-Za-z0-9]/_}.err | grep -v '"run": 0' | sed "s/^/$e w=$w /" | cut -c1-200
done
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
echo "total $(( $(date +%s) - T0 )) s"
