# call 2 (session 18): segments claimed by warps (next) against main: GPU loader/queue/md tests, then load_pretrained/load_file 8.5 GiB A/B
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 8.5 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$? $(date -u +%T)" ) > $OUT/img.log 2>&1 &
IMGP=$!
OUT=$OUT PHASES="build" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cd build-gpu && timeout 240 ctest -R "gpu.loader|gpu.queues|gpu.md|gpu.stream|gpu.moe" -j4 --output-on-failure) > $OUT/ctest.log 2>&1; echo "ctest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "tests passed|\(Failed\)|\*\*\*" $OUT/ctest.log | head
wait $IMGP; cat $OUT/img.log
OUT=$OUT/ab TREES="next main" CASE_TREES="main next main next" CASES="plain load_pretrained,plain load_file" timeout 300 bash bench/py_trees_ab.sh | grep -v "^\[" | sed 's/"pkg": "[^"]*", //' | cut -c1-160
L=$(( 560 - ($(date +%s) - T0) )); echo "modeled with ${L}s left"
[ $L -gt 60 ] && OUT=$OUT/ab2 TREES="next main" CASE_TREES="next main" CASES="modeled load_pretrained" timeout $L bash bench/py_trees_ab.sh | grep -v "^\[" | sed 's/"pkg": "[^"]*", //' | cut -c1-160
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
echo "total $(( $(date +%s) - T0 )) s"
