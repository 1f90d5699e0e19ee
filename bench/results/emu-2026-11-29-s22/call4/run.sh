#!/bin/bash
# call 4 (session 22): main (116d374) + bench/stream_llm.py's layer sampler (STREAM_SAMPLE):
# where the host's 42-53 ms inside decoder layer 0 go each step (call 3's trace: layer 0 is held
# that long, so layer 2's read starts late), against layer 5; then torch's profiler table
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: main $(cat abx/rev) + sampler"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv" timeout 200 bash bench/coherence_gpu_run.sh 2>&1 | tail -5
A=(40 8 1.6)
E="nsq=64&mqes=1023"
STREAM_SAMPLE=0 OUT=$R/s0 STEPS="model run" METHODS=ref,ssd EMUQ=$E timeout 200 bash bench/stream_llm_run.sh "${A[@]}" 2>&1 | tail -2 | cut -c1-300
grep sampler $R/s0/run.err | cut -c1-900
STREAM_SAMPLE=5 OUT=$R/s5 STEPS="run" METHODS=ssd EMUQ=$E timeout 100 bash bench/stream_llm_run.sh "${A[@]}" 2>&1 | tail -1 | cut -c1-300
grep sampler $R/s5/run.err | cut -c1-600
STREAM_PROFILE=1 OUT=$R/prof STEPS="run" METHODS=ssd EMUQ=$E timeout 100 bash bench/stream_llm_run.sh "${A[@]}" 2>&1 | tail -1 | cut -c1-300
head -45 $R/prof/run.err | cut -c1-200
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
