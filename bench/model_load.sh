#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 6 benchmark: load a synthetic safetensors model (default 8 GiB) into
# GPU memory, every method in the same run:
#   ours       gpunvme load: the model in an ext4 image served by the emulator
#              from RAM (snapshot=1), resolved through its extents, GPU threads
#              submitting the reads, data into GPU memory (Tier 2)
#   modeled    the same against the emulator's device model of a Gen4 x4 SSD
#              (7 GB/s, 1 M IOPS, 80 us): percentage of the modeled 7 GB/s
#   safetensors  bench/st_load.py: load_file(device="cuda") from a page-cached
#              copy of the file
#   cufile     cuFile (compat mode) reading the same page-cached file into GPU
#              memory (bench_gpu_bw --file, when built with cuFile)
# Usage: OUT=DIR bench/model_load.sh BUILD_DIR [SIZE]   (SIZE: 8G, 1G, ...)
# Logs and JSON go to $OUT; a CSV summary goes to stdout.
set -uo pipefail
B=${1:-build}
SIZE=${2:-8G}
OUT=${OUT:-/tmp/gpunvme-model-load}
mkdir -p "$OUT"
W=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-ml.XXXXXX")
trap 'rm -rf "$W"' EXIT
log() { echo "model_load: $*" >&2; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.3f", b - a }'; }  # no bc on every machine

echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null) cpus=$(nproc) size=$SIZE"
mkdir -p "$W/root"
t=$(now)
"$B/bin/gpunvme-mkmodel" --format safetensors --size "$SIZE" --seed 1 -o "$W/root/model.safetensors" \
	> "$OUT/mkmodel.log" 2>&1 || { cat "$OUT/mkmodel.log" >&2; exit 1; }
FSZ=$(stat -c %s "$W/root/model.safetensors")
log "model: $FSZ bytes in $(since "$t") s"
t=$(now)
truncate -s $(( (FSZ + FSZ / 16 + (256 << 20)) / 1048576 * 1048576 )) "$W/ext4.img"  # whole blocks
mkfs.ext4 -q -F -b 4096 -d "$W/root" "$W/ext4.img" > "$OUT/mkfs.log" 2>&1 || { cat "$OUT/mkfs.log" >&2; exit 1; }
log "ext4 image in $(since "$t") s"
# the other methods read the file from the page cache; keep it there
cat "$W/root/model.safetensors" > /dev/null

echo "method,config,bytes,seconds,gbps,wall_seconds,note"
run_ours() { # name config uri queues extra...
	local name=$1 cfg=$2 uri=$3 q=$4
	shift 4
	local t0 j
	t0=$(now)
	"$B/bin/gpunvme" load "$uri" /model.safetensors --tier 2 --queues "$q" --json "$@" \
		> "$OUT/$name-$cfg.json" 2> "$OUT/$name-$cfg.err"
	local rc=$?
	local wall
	wall=$(since "$t0")
	if [ $rc -ne 0 ]; then
		echo "$name,$cfg,,,,,failed rc=$rc: $(tail -n 1 "$OUT/$name-$cfg.err" | tr ',' ';')"
		return
	fi
	j=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d["bytes_read"], d["seconds"], d["gbps"], d["verified"])' "$OUT/$name-$cfg.json")
	read -r by se gb ve <<< "$j"
	echo "$name,$cfg,$by,$se,$gb,$wall,verified=$ve (wall includes emulator start: snapshot copy + pinning)"
}

IMG="$W/ext4.img"
for wq in "4 8" "8 16" "12 24" "16 32"; do
	read -r wk q <<< "$wq"
	run_ours ours "w${wk}q${q}" "emu:$IMG?snapshot=1&workers=$wk&mdts=9&nsq=64&mqes=1023" "$q"
done
# correctness of the fastest path at full size: every tensor compared
run_ours ours-verify w12q24 "emu:$IMG?snapshot=1&workers=12&mdts=9&nsq=64" 24 --verify
# modeled Gen4 x4 SSD: 7 GB/s, 1 M IOPS, 80 us
run_ours modeled w8q16 "emu:$IMG?snapshot=1&workers=8&mdts=9&nsq=64&read_mbps=7000&iops=1000000&latency_us=80" 16

# safetensors from the page cache
if python3 -c 'import torch' 2>/dev/null; then
	t0=$(now)
	if python3 "$(dirname "$0")/st_load.py" "$W/root/model.safetensors" > "$OUT/safetensors.json" 2> "$OUT/safetensors.err"; then
		python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("safetensors,page-cache,%d,%s,%s,%s,%s" % (d["bytes"], d["seconds"], d["gbps"], sys.argv[2], d["method"].replace(",", ";")))' \
			"$OUT/safetensors.json" "$(since "$t0")"
	else
		echo "safetensors,page-cache,,,,,failed: $(tail -n 1 "$OUT/safetensors.err" | tr ',' ';')"
	fi
else
	echo "safetensors,page-cache,,,,,no torch"
fi

# cuFile on the same file, compat mode, from the page cache (no O_DIRECT):
# the udev record and config as bench/gpu_bw.sh writes them. Whole 2 MiB
# chunks only: the last < 2 MiB of the file are not read by this row.
F="$W/root/model.safetensors"
if [ -x "$B/bin/bench_gpu_bw" ]; then
	majmin=$(findmnt -no MAJ:MIN -T "$F" 2>/dev/null | head -1 | tr -d ' ')
	fstype=$(findmnt -no FSTYPE -T "$F" 2>/dev/null | head -1 | tr -d ' ')
	if [ -n "$majmin" ] && [ ! -e "/run/udev/data/b$majmin" ] && [ "$(id -u)" -eq 0 ]; then
		mkdir -p /run/udev/data
		printf 'E:ID_FS_USAGE=filesystem\nE:ID_FS_TYPE=%s\n' "${fstype:-ext4}" > "/run/udev/data/b$majmin"
	fi
	mkdir -p "$OUT/cufile-logs"
	cat > "$OUT/cufile.json" <<JSON
{ "logging": { "dir": "$OUT/cufile-logs", "level": "ERROR" },
  "properties": { "allow_compat_mode": true, "force_compat_mode": true, "use_poll_mode": false,
                  "max_direct_io_size_kb": 16384 } }
JSON
	CB=$(( FSZ / (2 << 20) * (2 << 20) ))
	CUFILE_ENV_PATH_JSON="$OUT/cufile.json" "$B/bin/bench_gpu_bw" -m cufile -F -f "$F" -s "$CB" -c 2M -w 1,4,8 -r 1 \
		> "$OUT/cufile.csv" 2> "$OUT/cufile.log"
	if [ -s "$OUT/cufile.csv" ]; then
		awk -F, '{ printf "cufile,%s threads %s B chunks,%s,%s,%s,,%s\n", $3, $2, $5, $6, $7, $11 }' "$OUT/cufile.csv"
	else
		echo "cufile,file,,,,,failed: $(tail -n 1 "$OUT/cufile.log" | tr ',' ';')"
	fi
else
	echo "cufile,file,,,,,bench_gpu_bw not built"
fi
