#!/bin/bash
# call 6 (session 23, nvidia-h200): split's load rate on one GPU: bounce edges (--shrink) and warp batches, against layers in the same process
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv" timeout 150 bash bench/coherence_gpu_run.sh | tail -2
PW=/tmp/pyload; mkdir -p $PW/root
timeout 200 python3 bench/hf_models.py make $PW/root --big-gib 4 2>$R/make.err | tail -1
SZ=$(du -sb $PW/root | cut -f1); truncate -s $(((SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576)) $PW/ext4.img
mkfs.ext4 -q -F -b 4096 -d $PW/root $PW/ext4.img && cat $PW/ext4.img >/dev/null
U=emu:$PW/ext4.img
for v in plain shrink wb1 wb1shrink; do
	a=; e=
	case $v in *shrink) a=--shrink ;; esac
	case $v in wb1*) e=GPUNVME_GPU_WARP_BATCH=1 ;; esac
	echo "== $v"; env $e timeout 60 python3 bench/split_select.py $U /big --repeat 3 $a 2>$R/$v.err | tail -4 | cut -c1-160
done
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
