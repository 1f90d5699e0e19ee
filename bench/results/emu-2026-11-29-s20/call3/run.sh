#!/bin/bash
# call 3 (session 20): wip/s20 = wip/poll-probe + wip/workers12: the GPU suite under -j4 (12 workers through
# the DMA process wherever a test names none), then load_pretrained with the default URI (no ?workers)
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R; T0=$(date +%s)
echo "tree: wip/s20 792755e"
OUT=$R PHASES="build venv" bash bench/coherence_gpu_run.sh 2>&1 | tail -3
ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="j4:1" timeout 400 bash bench/coherence_gpu_run.sh 2>&1 | tail -8
for i in 1 2; do
 echo "default URI py process: $(timeout 60 python3 bench/hf_models.py bench emu:/tmp/pyload/ext4.img /big /tmp/pyload/root/big --repeat 3 --only-ours 2>>$R/def.err | python3 -c 'import json, sys
print(" ".join(str(d["gbps"]) for d in map(json.loads, sys.stdin) if "gbps" in d))')"
done
grep -i -m5 "error\|traceback" $R/def.err
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
echo "call: $(( $(date +%s) - T0 )) s"
