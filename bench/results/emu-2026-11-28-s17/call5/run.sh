# call 5 (session 17, main 62f9670): the new Python GPU test; md, 4 x Gen5, 512 KiB chunks: workers per member 4/2/1 and queues, with the profile; the layer stream on the modeled SSD if time is left
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cd python && timeout 90 python3 -m pytest -q tests/test_gpu.py -k "kept or repeated or load_file_cuda" 2>&1 | tail -3) > $OUT/pyt.log; cat $OUT/pyt.log
GPUNVME_EMU_PROFILE=1 OUT=$OUT/md WORKDIR=/dev/shm/mdw MEMBERS="4:4 4:2 4:1 4:2:32 4:4:32" CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout 240 bash bench/md_run.sh 4G > $OUT/md.log 2>&1; echo "md rc=$? $(( $(date +%s) - T0 )) s"; cat $OUT/md/summary.csv
for f in $OUT/md/load-*.err; do echo "$f: $(grep -c 'emu profile' $f) workers; $(grep -o 'outstanding [0-9.]* on average' $f | awk '{s+=$2} END {printf "outstanding sum %.1f", s}'); $(grep -o 'time [0-9.]* us on average' $f | head -4 | awk '{printf "%s ", $2}') us late"; done
L=$(( 560 - ($(date +%s) - T0) )); echo "stream with ${L}s left"
if [ $L -gt 150 ]; then STREAM_S=$((L - 20)) OUT=$OUT PHASES="stream32" bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "; fi
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
