#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 16 on a CUDA machine with torch, transformers, safetensors, accelerate
# and e2fsprogs, in one call:
#   1. build the library + tests (sm_90) and the Python extension with CUDA;
#      ctest -R stream (the CPU tier tests) and python/tests (GPU ones too);
#   2. bench/stream_llm.py make: a Llama from a config, random weights
#      (seed 0), bf16, saved in 1 GB shards, into an ext4 image (mkfs.ext4 -d);
#   3. bench/stream_llm.py run: greedy decoding with streamed layers against
#      the RAM-backed emulator and a modeled Gen4 SSD (7 GB/s), the resident
#      reference, per-layer mmap + .to("cuda"), accelerate disk offload.
# Usage: OUT=DIR [STEPS="build model run"] bench/stream_llm_run.sh [LAYERS] [TOKENS] [BUDGET_GIB]
# (STEPS picks steps; the model and image stay in $W for a later "run";
# METHODS picks methods of stream_llm.py run, e.g. "ref,ssd_t1,mmap,accel";
# WINDOW the stream's slots; TRACE=FILE writes the streams' timelines of
# the run step there, GPUNVME_STREAM_TRACE: include/gpunvme/stream.h)
set -uo pipefail
STEPS=${STEPS:-build model run pytest}
has() { case " $STEPS " in *" $1 "*) return 0 ;; esac; return 1; }
LAYERS=${1:-40}
TOKENS=${2:-8}
BUDGET=${3:-1.6}
OUT=${OUT:-/tmp/gpunvme-stream}
W=${W:-/tmp/gpunvme-stream-work}
mkdir -p "$OUT"
if has model; then
	rm -rf "$W"
	mkdir -p "$W/root"
fi
log() { echo "stream_llm: $*" | tee -a "$OUT/run.log" >&2; }
{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	nproc
	python3 -c 'import torch, transformers, safetensors, accelerate; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "safetensors", safetensors.__version__, "accelerate", accelerate.__version__)'
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

if has build; then
log "1. build (sm_90): library, stream tests; the Python extension with CUDA"
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
if [ "${CTEST:-0}" = 1 ]; then # the stream's C tests: CPU tier (CI runs them too) and GPU (gpu.stream.*)
	{ cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
		cmake --build build -j "$(nproc)" --target test_stream test_loader test_gpu_stream; } > "$OUT/cmake.log" 2>&1 || log "C build failed (cmake.log)"
	(cd build && ctest -R 'loader\.(stream|layer)|gpu\.stream' --output-on-failure > "$OUT/ctest.log" 2>&1)
	log "ctest rc=$? $(grep -E 'tests passed|tests failed' "$OUT/ctest.log")"
fi
if ! python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python > "$OUT/pip.log" 2>&1; then
	tail -n 30 "$OUT/pip.log" >&2
	log "pip install failed"
	exit 1
fi
python3 -c 'import gpunvme; print("gpunvme", gpunvme.__file__, gpunvme.cuda_available())' 2>&1 | tee -a "$OUT/run.log"
fi

if has model; then
log "2. model and image"
t=$(date +%s)
python3 bench/stream_llm.py make "$W/root" --layers "$LAYERS" 2> "$OUT/make.err" | tee -a "$OUT/results.jsonl" || { tail -20 "$OUT/make.err"; exit 1; }
SZ=$(du -sb "$W/root" | cut -f1)
truncate -s $(( (SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576 )) "$W/ext4.img"
mkfs.ext4 -q -F -b 4096 -d "$W/root" "$W/ext4.img" > "$OUT/mkfs.log" 2>&1 || { cat "$OUT/mkfs.log" >&2; exit 1; }
log "model + image in $(( $(date +%s) - t )) s"
fi

if has run; then
cat "$W/root/llm"/* > /dev/null   # page cache: the baselines read the files from RAM
log "3. decode"
# EMUQ: the device string's options (issue 32 runs the image itself: EMUQ="nsq=64&mqes=1023")
EMU="emu:$W/ext4.img?${EMUQ:-snapshot=1&workers=12&mdts=9&nsq=64&mqes=1023}"
SSD="$EMU&read_mbps=7000&latency_us=80&iops=1000000"
${TRACE:+env GPUNVME_STREAM_TRACE=$TRACE} python3 bench/stream_llm.py run "$EMU" "$SSD" "$W/root" --work "$W" --tokens "$TOKENS" --budget-gib "$BUDGET" \
	${METHODS:+--methods "$METHODS"} ${WINDOW:+--window "$WINDOW"} \
	2> "$OUT/run.err" | tee -a "$OUT/results.jsonl"
log "run rc=$?"
tail -n 5 "$OUT/run.err" >&2
fi

if has pytest; then
	log "4. python tests: ${PYTESTS:-tests} (GPU ones included)"
	(cd python && timeout 240 python3 -m pytest -q ${PYTESTS:-tests} > "$OUT/pytest.log" 2>&1)
	log "pytest rc=$? $(tail -n 1 "$OUT/pytest.log")"
fi
