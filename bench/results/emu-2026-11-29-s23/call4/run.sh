#!/bin/bash
# call 4 (session 23, nvidia-h200): main + one allocation per selection: split's host cost on one GPU (bench/split_select.py), then the Python GPU tests
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
echo "tree has run_at: $(grep -c run_at src/loader/model_load.c)"
OUT=$R PHASES="build venv" PIP=0 timeout 60 bash bench/coherence_gpu_run.sh | tail -2
python3 -c 'import gpunvme, os; print(gpunvme.__file__)'
PY_GIB=8.5; PW=/tmp/pyload; mkdir -p $PW/root
timeout 200 python3 bench/hf_models.py make $PW/root --big-gib 8.5 2>$R/make.err | tail -1
SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img && cat $PW/ext4.img >/dev/null
timeout 120 python3 bench/split_select.py emu:$PW/ext4.img /big --repeat 4 2>$R/split_select.err | tee $R/split_select.jsonl
tail -5 $R/split_select.err
OUT=$R PHASES="pyt" timeout 420 bash bench/coherence_gpu_run.sh
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
