# call 3 (session 18): strided segments + 2D staged copies (next) against main: GPU tests, then md 4 x Gen5 at 512 KiB chunks, same array, alternating trees and 2D off
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
OUT=$OUT PHASES="build" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
(cmake -S abx/main -B build-main -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 && cmake --build build-main -j16) > $OUT/build-main.log 2>&1; echo "main built rc=$? at $(( $(date +%s) - T0 )) s"
(cd build-gpu && timeout 200 ctest -R "gpu.md|gpu.loader|gpu.queues|gpu.stream|gpu.moe" -j4 --output-on-failure) > $OUT/ctest.log 2>&1; echo "ctest rc=$? at $(( $(date +%s) - T0 )) s"; grep -E "tests passed|\(Failed\)|\*\*\*|Timeout" $OUT/ctest.log | head
M="read_mbps=14000&iops=2500000&latency_us=60"
for v in main next next2d0 main next next2d0; do
  L=$(( 540 - ($(date +%s) - T0) )); [ $L -lt 50 ] && break
  B=$PWD/build-gpu; E=; [ $v = main ] && B=$PWD/build-main; [ $v = next2d0 ] && E="GPUNVME_EMU_STAGE_2D=0"
  env $E GPUNVME_EMU_PROFILE=1 MODEL="$M" OUT=$OUT/md-$v-$L WORKDIR=/dev/shm/mdw MEMBERS="4:4" CHUNK=512 BUILD="$B" SKIP_BUILD=1 TMPDIR=/dev/shm timeout $(( L < 100 ? L : 100 )) bash bench/md_run.sh 4G > $OUT/md-$v-$L.log 2>&1
  echo "$v rc=$? $(( $(date +%s) - T0 )) s: $(tail -n 1 $OUT/md-$v-$L/summary.csv)"
done
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
echo "total $(( $(date +%s) - T0 )) s"
