#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Where a fresh-process layer-stream run waits (issue 16, diagnosis in
# bench/results/stream-llm-2026-11-25): a 12-layer random Llama in an ext4
# image in /dev/shm, the resident reference, then the stream against the
# modeled 7 GB/s SSD as designed, with sync_reads, and with one CUDA hardware
# queue, each in its own process with the emulator's copy-lane trace
# (GPUNVME_LANE_TRACE) and a Python stack dump every 6 s (STREAM_DIAG_TB).
# Usage on a CUDA machine with torch + transformers: OUT=DIR bench/stream_diag.sh
set -u
OUT=${OUT:-/tmp/sd-out}; mkdir -p "$OUT"
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python > "$OUT/pip.log" 2>&1 || { tail -30 "$OUT/pip.log"; exit 1; }
W=/dev/shm/sd; rm -rf $W; mkdir -p $W/root
python3 bench/stream_llm.py make $W/root --layers ${LAYERS:-12} > "$OUT/make.log" 2>&1 || { tail "$OUT/make.log"; exit 1; }
SZ=$(du -sb "$W/root" | cut -f1)
truncate -s $(( (SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576 )) "$W/ext4.img"
mkfs.ext4 -q -F -b 4096 -d "$W/root" "$W/ext4.img"
EMU="emu:$W/ext4.img?snapshot=1&workers=12&mdts=9&nsq=64&mqes=1023"
SSD="$EMU&read_mbps=7000&latency_us=80&iops=1000000"
C="--work $W --tokens 3 --budget-gib 0.6"
python3 bench/stream_llm.py one ref "$EMU" "$SSD" $W/root $C > "$OUT/ref.json" 2> "$OUT/ref.err"
echo "ref rc=$?"
export GPUNVME_LANE_TRACE=1 STREAM_DIAG_TB=6
i=0
for v in "ssd" "ssd --sync-reads" "C1 ssd" ; do
	i=$((i+1))
	case $v in C1*) v=${v#C1 }; export CUDA_DEVICE_MAX_CONNECTIONS=1 ;; esac
	timeout 60 python3 bench/stream_llm.py one $v "$EMU" "$SSD" $W/root $C > "$OUT/v$i.json" 2> "$OUT/v$i.err"
	echo "v$i [$v] rc=$? $(grep -o '"error": "[^"]*"\|"s_per_token": [0-9.]*' "$OUT/v$i.json" | head -2)"
done
