#!/bin/bash
# call 3 (session 22): main (116d374): the layer stream on the emulator's Tier 2 (modeled 7 GB/s SSD),
# ref and ssd, with the stream's trace cut into steps: what the first decode step pays
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: main $(cat abx/rev)"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv stream32" STREAM_S=480 timeout 570 bash bench/coherence_gpu_run.sh 2>&1 | tail -40
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
