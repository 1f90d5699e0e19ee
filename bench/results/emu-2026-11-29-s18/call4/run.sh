# call 4 (session 18): strided segments + 2D copies from pinned RAM namespaces (next) against main: md 4 x Gen5 at 512 KiB chunks, same array (main, next, next with GPUNVME_EMU_2D=0, next); then the whole GPU suite under -j4
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
OUT=$OUT PHASES="build" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cmake -S abx/main -B build-main -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-main -j16) > $OUT/build-main.log 2>&1; echo "main built rc=$? at $(( $(date +%s) - T0 )) s"
OUT=$OUT PHASES="venv" timeout 100 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
M="read_mbps=14000&iops=2500000&latency_us=60"
for v in main next next2d0 next; do
  B=$PWD/build-gpu; E=; [ $v = main ] && B=$PWD/build-main; [ $v = next2d0 ] && E="GPUNVME_EMU_2D=0"
  env $E GPUNVME_EMU_PROFILE=1 MODEL="$M" OUT=$OUT/md-$v-$(date +%s) WORKDIR=/dev/shm/mdw MEMBERS="4:4" CHUNK=512 BUILD="$B" SKIP_BUILD=1 TMPDIR=/dev/shm timeout 90 bash bench/md_run.sh 4G > $OUT/md-$v.log 2>&1
  echo "$v rc=$? $(( $(date +%s) - T0 )) s: $(tail -n 1 $(ls -d $OUT/md-$v-* | tail -1)/summary.csv)"
done
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
L=$(( 580 - ($(date +%s) - T0) )); echo "j4 with ${L}s"
(cd build-gpu && timeout $L ctest -L gpu -j4 --output-on-failure) > $OUT/j4.log 2>&1; echo "j4 rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "tests passed|\(Failed\)|\*\*\*|Timeout|Not Run" $OUT/j4.log | head
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
echo "total $(( $(date +%s) - T0 )) s"
