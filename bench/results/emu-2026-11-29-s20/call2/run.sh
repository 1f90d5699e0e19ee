#!/bin/bash
# call 2 (session 20): wip/poll-probe (13dbda6): md 4 x Gen5 at 512 KiB with the warp waits' probe off / on / 16 us pauses
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R
echo "tree: wip/poll-probe 13dbda6"
OUT=$R PHASES="pollab" timeout 560 bash bench/coherence_gpu_run.sh 2>&1 | tail -20
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
