# call 3 (session 17): kept loader memory (next = wip/memcache) against main (abx/main = b2a303c), same run; gpu.loader; stages with the profile
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
( OUT=$OUT/b PHASES="build" timeout 200 bash bench/coherence_gpu_run.sh > $OUT/build-phase.log 2>&1 ) &
BP=$!
PY_GIB=4 OUT=$OUT TREES="next main" PYT="tests/test_gpu.py tests/test_shared_loader.py" CASE_TREES="next main" CASES="modeled load_file,modeled load_pretrained,plain load_file" timeout 400 bash bench/py_trees_ab.sh 2>&1 | grep -v "^\s*$" | cut -c1-200 | tail -30
echo "ab done $(( $(date +%s) - T0 )) s"
wait $BP; tail -3 $OUT/build-phase.log
(cd build-gpu && timeout 120 ctest -R "gpu.loader" --output-on-failure) > $OUT/loader.log 2>&1; echo "gpu.loader rc=$?"; grep -E "tests passed|Failed|kept_memory:" $OUT/loader.log | head
for t in next main; do
  PYTHONPATH=/tmp/pk_$t GPUNVME_LOAD_PROFILE=1 GPUNVME_EMU_PROFILE=1 timeout 60 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 7000 > $OUT/stages-$t.jsonl 2> $OUT/stages-$t.err
  echo "stages $t rc=$?: $(python3 -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1])][1:]
print(" ".join("%s%% (load %s%%)" % (x["pct"], x["load_pct"]) for x in r))' $OUT/stages-$t.jsonl 2>&1)"
  grep -c "DMA process: GPU" $OUT/stages-$t.err
done
echo "end $(( $(date +%s) - T0 )) s"
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
