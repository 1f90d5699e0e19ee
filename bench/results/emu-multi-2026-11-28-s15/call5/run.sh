# call 5, as sent (the working tree: wip/spans)
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
( PW=/tmp/pyload; mkdir -p $PW/root; python3 bench/hf_models.py make $PW/root --big-gib 4 >/dev/null 2>$OUT/make.err; SZ=$(du -sb $PW/root|cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/tmp.img && mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/tmp.img && mv $PW/tmp.img $PW/ext4.img; echo "IMG rc=$?" ) > $OUT/img.log 2>&1 &
OUT=$OUT PHASES="build venv" timeout 240 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cd build-gpu && timeout 120 ctest -R "many_spans|first_loader|tier2_random|tier1_random" --output-on-failure) > $OUT/spans.log 2>&1; echo "spans rc=$?"; grep -E "tests passed|FAIL|every byte" $OUT/spans.log | head -8
STOP_ON_FAIL=1 OUT=$OUT PHASES="j4:1" timeout 330 bash bench/coherence_gpu_run.sh | grep -E "j4|Failed|\*\*\*"
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
