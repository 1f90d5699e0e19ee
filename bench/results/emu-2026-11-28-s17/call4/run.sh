# call 4 (session 17): the GPU suite on wip/memcache (da0b0b7), ctest -L gpu -j4, with gpu.matrix
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT; T0=$(date +%s)
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
(cd build-gpu && timeout 480 ctest -L gpu -j4 --output-on-failure) > $OUT/j4.log 2>&1; echo "j4 rc=$? $(( $(date +%s) - T0 )) s"; grep -E "tests passed|Failed|\*\*\*|Timeout" $OUT/j4.log | head -12
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
