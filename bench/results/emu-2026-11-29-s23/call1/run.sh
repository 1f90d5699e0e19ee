#!/bin/bash
# call 1 (session 23, nvidia-h200-x2): main d009e9a: acceptance 4 (multi2) and acceptance 2 at every entry point (modeled)
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
nvidia-smi topo -m > $R/topo.txt 2>&1; nproc; free -g | head -2
OUT=$R PHASES="build venv multi2 modeled" PYREP=3 timeout 560 bash bench/coherence_gpu_run.sh
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
