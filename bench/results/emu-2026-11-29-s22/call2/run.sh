#!/bin/bash
# call 2 (session 22): main (116d374): acceptance 1 on main's default (12 workers through the DMA process):
# load_pretrained against load_file and from_pretrained (pyload), then workers=12 twice, with the CLI
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
echo "tree: main $(cat abx/rev)"
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv pyload workers" MERGE=default PYREP=3 WLIST=12 WREP=2 timeout 570 bash bench/coherence_gpu_run.sh 2>&1 | tail -40
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
