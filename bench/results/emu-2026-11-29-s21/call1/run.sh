#!/bin/bash
# call 1 (session 21): wip/s21 (the probe, 12 workers through the DMA process, 256 lanes, lazy loading from Python): -L gpu -j4
R=$OUT; mkdir -p $R
echo "tree: wip/s21 $(cat abx/rev)"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv j4:1" timeout 570 bash bench/coherence_gpu_run.sh 2>&1 | tail -30
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
