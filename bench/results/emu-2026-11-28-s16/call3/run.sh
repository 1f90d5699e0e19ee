# call 3 (session 16): the parked loader (next = wip/park) against main (abx/main = 27a8c72), same run; Python GPU tests; md profile
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
PY_GIB=4 OUT=$OUT TREES="next main" PYT="tests/test_shared_loader.py tests/test_gpu.py tests/test_stream.py tests/test_gpu_moe.py tests/test_load.py" CASE_TREES="next main" CASES="modeled load_file,modeled load_pretrained,plain load_file" timeout 400 bash bench/py_trees_ab.sh 2>&1 | grep -v "^\s*$" | cut -c1-260 | tail -40
L=$(( 560 - ($(date +%s) - T0) )); echo "md with ${L}s left"
if [ $L -gt 80 ]; then
( OUT=$OUT PHASES="build" timeout 100 bash bench/coherence_gpu_run.sh >/dev/null 2>&1
L=$(( 565 - ($(date +%s) - T0) ))
GPUNVME_EMU_PROFILE=1 OUT=$OUT/md WORKDIR=/dev/shm/mdw MEMBERS=4 CHUNK=512 BUILD="$PWD/build-gpu" SKIP_BUILD=1 TMPDIR=/dev/shm timeout $L bash bench/md_run.sh 4G > $OUT/md.log 2>&1; echo "md rc=$?"; tail -1 $OUT/md/summary.csv )
fi
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
