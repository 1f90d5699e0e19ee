#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 13 on a CUDA machine with torch, transformers and safetensors, in one
# call: build the library and the Python extension with CUDA, then
#   1. the Python tests (python/tests, GPU ones included);
#   2. a tiny Llama (random weights, save_pretrained into several shards) in an
#      ext4 image: logits of the model fed by gpunvme.load_pretrained(device=
#      "cuda") bitwise equal to from_pretrained's (bench/hf_models.py check);
#   3. a ~8.5 GiB Llama checkpoint written by save_pretrained into the same
#      image: gpunvme.load_pretrained vs safetensors.torch.load_file(device=
#      "cuda") shard by shard vs AutoModelForCausalLM.from_pretrained(
#      device_map="cuda"), one process (bench/hf_models.py bench).
# Usage: OUT=DIR bench/python_load.sh [BIG_GIB]   (0 skips step 3)
set -uo pipefail
BIG=${1:-8.5}
OUT=${OUT:-/tmp/gpunvme-pyload}
mkdir -p "$OUT"
W=${W:-/tmp/gpunvme-pyload-work}
rm -rf "$W"
mkdir -p "$W/root"
log() { echo "python_load: $*" | tee -a "$OUT/run.log" >&2; }
{
	date -u
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
	nproc
	python3 -c 'import torch, transformers, safetensors; print("torch", torch.__version__, "cuda", torch.version.cuda, "transformers", transformers.__version__, "safetensors", safetensors.__version__)'
	git log --oneline -1 2>/dev/null || true
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

log "build: the CLI (same-run reference) and the Python extension with CUDA (sm_90)"
export CMAKE_CUDA_ARCHITECTURES=90 GPUNVME_CUDA=ON
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 > "$OUT/cmake.log" 2>&1 &&
	cmake --build build -j "$(nproc)" --target gpunvme-cli >> "$OUT/cmake.log" 2>&1 || log "CLI build failed (see cmake.log)"
# the machine's Python may be "externally managed" (PEP 668): it is a
# throwaway machine, so the package goes into its site-packages anyway
if ! python3 -m pip install --no-build-isolation --no-deps ./python > "$OUT/pip.log" 2>&1 &&
	! python3 -m pip install --no-build-isolation --no-deps --break-system-packages ./python >> "$OUT/pip.log" 2>&1; then
	tail -n 30 "$OUT/pip.log" >&2
	log "pip install failed"
	exit 1
fi
python3 -c 'import gpunvme, sys; print("gpunvme", gpunvme.__file__, getattr(gpunvme, "cuda_available", lambda: "?")())' 2>&1 | tee -a "$OUT/run.log"

log "1. python tests"
(cd python && timeout 600 python3 -m pytest -q tests > "$OUT/pytest.log" 2>&1)
echo "pytest rc=$? $(tail -n 1 "$OUT/pytest.log")" | tee -a "$OUT/run.log"

log "2. models"
python3 bench/hf_models.py make "$W/root" --big-gib "$BIG" 2>"$OUT/make.err" | tee -a "$OUT/results.jsonl"
du -sb "$W/root"/* | tee -a "$OUT/run.log"
SZ=$(du -sb "$W/root" | cut -f1)
truncate -s $(( (SZ + SZ / 16 + (512 << 20)) / 1048576 * 1048576 )) "$W/ext4.img"
t=$(date +%s)
mkfs.ext4 -q -F -b 4096 -d "$W/root" "$W/ext4.img" > "$OUT/mkfs.log" 2>&1 || { cat "$OUT/mkfs.log" >&2; exit 1; }
log "ext4 image in $(( $(date +%s) - t )) s"
cat "$W/ext4.img" > /dev/null   # page cache: the same start for every reader

log "3. tiny Llama: logits through gpunvme.load_pretrained vs from_pretrained"
python3 bench/hf_models.py check "emu:$W/ext4.img" /tiny "$W/root/tiny" 2>"$OUT/check.err" | tee -a "$OUT/results.jsonl"

if [ "$BIG" != 0 ]; then
	log "4. benchmark: ${BIG} GiB checkpoint"
	cat "$W/root/big"/*.safetensors > /dev/null
	python3 bench/hf_models.py bench "emu:$W/ext4.img?workers=8&mdts=9&nsq=64&mqes=1023" /big "$W/root/big" --repeat 2 \
		2>"$OUT/bench.err" | tee -a "$OUT/results.jsonl"
	# the image from RAM (snapshot=1: what benchmarks use to stand in for a
	# fast SSD), more emulator workers and queues; the CLI on the same URI
	SNAP="emu:$W/ext4.img?snapshot=1&workers=12&mdts=9&nsq=64&mqes=1023"
	python3 bench/hf_models.py bench "$SNAP" /big "$W/root/big" --repeat 3 --only-ours --queues 24 \
		2>>"$OUT/bench.err" | tee -a "$OUT/results.jsonl"
	python3 bench/hf_models.py bench "$SNAP" /big "$W/root/big" --repeat 2 --only-ours \
		2>>"$OUT/bench.err" | tee -a "$OUT/results.jsonl"
	python3 bench/hf_models.py breakdown "$SNAP" /big --queues 24 2>>"$OUT/bench.err" | tee -a "$OUT/results.jsonl"
	if [ -x build/bin/gpunvme ]; then
		for r in 1 2; do
			build/bin/gpunvme load "$SNAP" /big --tier 2 --queues 24 --json --no-progress > "$OUT/cli-$r.json" 2>"$OUT/cli-$r.err"
			python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(json.dumps({"method": "gpunvme load (CLI)", "seconds": d["seconds"], "gbps": d["gbps"], "bytes": d["bytes_read"], "files": d["files"], "layout": d["layout"], "note": "queues 24; " + sys.argv[2]}))' \
				"$OUT/cli-$r.json" "$SNAP" | tee -a "$OUT/results.jsonl"
		done
	fi
fi
grep -h -i "error\|traceback" "$OUT"/*.err 2>/dev/null | head -20
rm -rf "$W"
