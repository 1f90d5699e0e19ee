# call 1, as sent (abx/maint: main + the two new tests; the working tree: wip/run15)
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 8.5 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$?" ) > $OUT/img.log 2>&1 &
IMGP=$!
( cd abx/maint && cmake -S . -B bm -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build bm -j6 --target test_gpu_loader ) > $OUT/maint-build.log 2>&1 &
MB=$!
OUT=$OUT PHASES="build" timeout 200 bash bench/coherence_gpu_run.sh
wait $MB; echo "maint build rc=$?"
(cd abx/maint/bm && timeout 60 ctest -R first_loader_freed --output-on-failure) > $OUT/maint-first.log 2>&1; echo "MAIN first_loader_freed rc=$?"; grep -E "tests passed|illegal|FAIL|error" $OUT/maint-first.log | head -5
(cd build-gpu && timeout 60 ctest -R first_loader_freed --output-on-failure) > $OUT/next-first.log 2>&1; echo "NEXT first_loader_freed rc=$?"; grep -E "tests passed|FAIL" $OUT/next-first.log | head -3
OUT=$OUT PHASES="venv j4:1" timeout 300 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores"
(cd python && timeout 120 python3 -m pytest -q -rs tests/test_shared_loader.py tests/test_gpu.py > $OUT/pyt.log 2>&1); echo "pytest rc=$? $(tail -1 $OUT/pyt.log)"; grep -E "^(FAILED|ERROR)" $OUT/pyt.log | head
wait $IMGP; cat $OUT/img.log; ls -la /tmp/pyload
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
