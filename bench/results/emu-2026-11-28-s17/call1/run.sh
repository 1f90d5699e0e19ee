# call 1 (session 17): stages (copy modes x step sizes, profiles); md with the emulator profile; gpu.matrix
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 4 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$? $(date -u +%T)" ) > $OUT/img.log 2>&1 &
IMGP=$!
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
(cd build-gpu && timeout 150 ctest -R gpu.matrix --output-on-failure) > $OUT/matrix.log 2>&1; echo "matrix rc=$? $(( $(date +%s) - T0 )) s"; grep -E "tests passed|Failed|passed|failed" $OUT/matrix.log | tail -5
wait $IMGP; cat $OUT/img.log
OUT=$OUT PHASES="stages" timeout 250 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
echo "after stages $(( $(date +%s) - T0 )) s"
L=$(( 570 - ($(date +%s) - T0) )); echo "md with ${L}s left"
if [ $L -gt 60 ]; then GPUNVME_EMU_PROFILE=1 OUT=$OUT/md WORKDIR=/dev/shm/mdw MEMBERS=4 CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout $L bash bench/md_run.sh 4G > $OUT/md.log 2>&1; echo "md rc=$?"; cat $OUT/md/summary.csv; grep -i "late\|outst\|idle" $OUT/md/load-*.err | head -20 | cut -c1-300; fi
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
