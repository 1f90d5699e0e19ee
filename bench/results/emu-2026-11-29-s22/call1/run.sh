#!/bin/bash
# call 1 (session 22): main (116d374): -L gpu -j4, the landed tree's second pass
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: main $(cat abx/rev)"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv j4:1" timeout 570 bash bench/coherence_gpu_run.sh 2>&1 | tail -30
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
