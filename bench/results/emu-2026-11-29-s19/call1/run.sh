#!/bin/bash
export PATH=$PWD/build/devtools/bin:$PATH LD_LIBRARY_PATH=$PWD/build/devtools/lib:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version,utilization.gpu,memory.used --format=csv
OUT=$OUT PHASES="build venv open64" bash bench/coherence_gpu_run.sh 2>&1 | tail -30
OUT=$OUT/md PHASES="md2d" MD2D_RUNS=2 timeout 430 bash bench/coherence_gpu_run.sh 2>&1 | tail -20
OUT=$OUT PHASES=pack bash bench/coherence_gpu_run.sh >/dev/null 2>&1
ls -la $OUT
