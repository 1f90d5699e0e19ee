#!/bin/bash
# call 1 (session 20): main's emulator workers 8/12/16 through the DMA process and in process, and the CLI
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
R=$OUT; mkdir -p $R
git_rev=$(cat .git-rev 2>/dev/null); echo "tree: main 9558197"
OUT=$R PHASES="build venv workers" timeout 560 bash bench/coherence_gpu_run.sh 2>&1 | tail -40
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
