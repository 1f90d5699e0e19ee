#!/bin/bash
# call 2 (session 23, nvidia-h200-x2): main d009e9a + multi_gpu.py own_split/--profile: where split's time goes; then stream32 x3 at the default window
export PATH=$PWD/build/devtools/bin:$PATH
R=$OUT; mkdir -p $R
mkdir -p build && ln -sfn ../build-gpu/bin build/bin
OUT=$R PHASES="build venv" timeout 100 bash bench/coherence_gpu_run.sh | tail -2
OUT=$R PHASES="multi2" PYREP=2 MGROWS=one,own_ctrls,layers,split,own_split MGPROF=split timeout 250 bash bench/coherence_gpu_run.sh
mv $R/multi2.err $R/multi2-prof.err
grep -A40 "profile of row" $R/multi2-prof.err | head -45
echo "--- load profile, split then layers"
GPUNVME_LOAD_PROFILE=1 timeout 100 python3 bench/multi_gpu.py emu:/tmp/pyload/ext4.img /big /tmp/pyload/root/big --repeat 2 --rows split,layers 2>$R/loadprof.err | cut -c1-200
head -c 6000 $R/loadprof.err
OUT=$R PHASES="stream32" SROUNDS=3 timeout 300 bash bench/coherence_gpu_run.sh
OUT=$R PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
