#!/bin/bash
# call 3 (session 21): wip/s21 (the probe, 12 workers through the DMA process, 256 lanes; eager loading kept): -L gpu -j4, then the probe on/off on md
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: wip/s21 $(cat abx/rev)"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R POLL_CTEST=0 PHASES="build venv j4:1 pollab" timeout 575 bash bench/coherence_gpu_run.sh 2>&1 | tail -30
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
