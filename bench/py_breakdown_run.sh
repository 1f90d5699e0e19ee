#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Where a gpunvme.load_pretrained call's time goes (issue 13,
# bench/results/python-2026-11-25, "Where a call's time goes"): an 8 GiB
# gpunvme-mkmodel safetensors model in an ext4 image served from RAM by the
# emulator, bench/hf_models.py breakdown with 24 queues and with the default,
# then the CLI's `gpunvme load` of the same model twice for comparison.
# On a CUDA machine with torch: OUT=DIR bash bench/py_breakdown_run.sh
set -uo pipefail
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > $OUT/cmake.log 2>&1 && cmake --build build -j 16 --target gpunvme-cli gpunvme-mkmodel >> $OUT/cmake.log 2>&1 &
python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python > $OUT/pip.log 2>&1 || python3 -m pip install --no-build-isolation --no-deps ./python >> $OUT/pip.log 2>&1
wait
W=/tmp/w; mkdir -p $W/root/big
build/bin/gpunvme-mkmodel --format safetensors --size 8G --seed 1 -o $W/root/big/model.safetensors > /dev/null
truncate -s 9G $W/img; mkfs.ext4 -q -F -b 4096 -d $W/root $W/img
SNAP="emu:$W/img?snapshot=1&workers=12&mdts=9&nsq=64&mqes=1023"
python3 bench/hf_models.py breakdown "$SNAP" /big --queues 24
python3 bench/hf_models.py breakdown "$SNAP" /big
for r in 1 2; do /usr/bin/time -f "cli wall %e s" build/bin/gpunvme load "$SNAP" /big --tier 2 --queues 24 --json --no-progress > $OUT/cli.json; python3 -c 'import json;d=json.load(open("'$OUT'/cli.json"));print("cli load seconds", d["seconds"], d["gbps"])'; done
