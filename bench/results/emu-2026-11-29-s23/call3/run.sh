#!/bin/bash
# call 3 (session 23, nvidia-h200: the x2 kind was no longer lent): main + one allocation per selection: ctest -L gpu -j4
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv j4:1" timeout 560 bash bench/coherence_gpu_run.sh
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
