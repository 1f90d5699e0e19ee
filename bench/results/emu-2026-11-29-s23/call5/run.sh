#!/bin/bash
# call 5 (session 23, nvidia-h200): why split's load alone is 30 GB/s against layers' 35.6 on one GPU: profiles, gap, DMA process or not
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv" timeout 150 bash bench/coherence_gpu_run.sh | tail -2
PW=/tmp/pyload; mkdir -p $PW/root
timeout 200 python3 bench/hf_models.py make $PW/root --big-gib 4 2>$R/make.err | tail -1
SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img && cat $PW/ext4.img >/dev/null
U=emu:$PW/ext4.img
echo "== plain"; timeout 60 python3 bench/split_select.py $U /big --repeat 3 2>$R/plain.err | cut -c1-160
echo "== gap default"; timeout 60 python3 bench/split_select.py $U /big --repeat 2 --gap -1 2>$R/gap.err | cut -c1-160
echo "== inproc"; GPUNVME_EMU_DMA=inproc timeout 60 python3 bench/split_select.py $U /big --repeat 2 2>$R/inproc.err | cut -c1-160
echo "== profiles"; GPUNVME_LOAD_PROFILE=1 GPUNVME_EMU_PROFILE=1 timeout 60 python3 bench/split_select.py $U /big --repeat 2 2>$R/prof.err | cut -c1-160
grep -h "load profile" $R/prof.err | head -8
grep -v "load profile" $R/prof.err | tail -60 | cut -c1-220
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
