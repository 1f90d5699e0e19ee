# call 4 (session 16): wip/park: the GPU suite (-L gpu -j4) and the Python tests that need the CPU build's fake target
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
OUT=$OUT PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh | grep -v "^tools\|^cores\|^[0-9a-f]\{7\} "
mkdir -p build && ln -sfn ../build-gpu/bin build/bin && ls build/bin/gpunvme-fake-target
(cd python && timeout 120 python3 -m pytest -q -rs tests/test_load.py tests/test_shared_loader.py > $OUT/pyt.log 2>&1); echo "pytest rc=$? $(tail -1 $OUT/pyt.log)"; grep -E "^(FAILED|ERROR)" $OUT/pyt.log | head
echo "before j4: $(( $(date +%s) - T0 )) s"
(cd build-gpu && timeout 400 ctest -L gpu -j4 --output-on-failure > $OUT/j4.log 2>&1); echo "j4 rc=$?"; grep -E "tests passed|\*\*\*Failed|Timeout" $OUT/j4.log | head; grep "Total Test time" $OUT/j4.log
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
