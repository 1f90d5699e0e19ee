# call 2 (session 17): the kept IPC opens (next = wip/keep faa3cdf) against main (abx/main = b2a303c), same run; Python GPU tests; stages with the profile
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:$LD_LIBRARY_PATH
mkdir -p $OUT
T0=$(date +%s)
PY_GIB=4 OUT=$OUT TREES="next main" PYT="tests/test_gpu.py tests/test_shared_loader.py tests/test_stream.py tests/test_gpu_moe.py" CASE_TREES="next main" CASES="modeled load_file,modeled load_pretrained,plain load_file" timeout 420 bash bench/py_trees_ab.sh 2>&1 | grep -v "^\s*$" | cut -c1-200 | tail -30
echo "ab done $(( $(date +%s) - T0 )) s"
for t in next main; do
  PYTHONPATH=/tmp/pk_$t GPUNVME_LOAD_PROFILE=1 GPUNVME_EMU_PROFILE=1 timeout 60 python3 bench/shard_stages.py /tmp/pyload/ext4.img /big 7000 > $OUT/stages-$t.jsonl 2> $OUT/stages-$t.err
  echo "stages $t rc=$?: $(python3 -c 'import json,sys
r = [json.loads(l) for l in open(sys.argv[1])][1:]
print(" ".join("%s%% (load %s%%)" % (x["pct"], x["load_pct"]) for x in r))' $OUT/stages-$t.jsonl 2>&1)"
  grep "DMA process: GPU" $OUT/stages-$t.err | head -12 | cut -c1-150
done
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null
