#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 17 benchmark: a >= 16 GiB safetensors model in ext4 on a modeled md
# RAID0 of N Gen5 drives (each an emulated controller serving its member
# image from RAM with the device model read_mbps=14000, iops=2.5M,
# latency_us=60), loaded by `gpunvme load md:...` into GPU memory (Tier 2,
# GPU queues on every member controller), N = 1, 2, 4 (scaling).
# Reports GB/s and the percentage of min(N x 14 GB/s, the PCIe link): the link
# as gen x width and as measured (pinned cudaMemcpy, bench_gpu_bw -m memcpy).
# The member images get md v1.2 superblocks written here (bench/md_mkraid0.py,
# the layout mdadm --create --metadata=1.2 --level=0 writes); the run checks
# the array first with `gpunvme ls` and the load with --verify on N = 4.
# Self-contained: builds into build-md (CUDA arch 90), logs under $OUT.
# Usage: OUT=DIR bench/md_run.sh [SIZE]      (SIZE default 16G)
#   MEMBERS="1 2 4" (default; an entry N:W sets W emulator workers per member,
#   N:W:Q also Q GPU queue pairs per member), ONECTRL=1 (the members as
#   namespaces of one emulated controller with W workers),
#   QUEUES (GPU queue pairs per member, default 16), DEPTH (entries per
#   queue), MODEL (the device model's options, '' for none), CHUNK (KiB,
#   default 512; the image holds whole stripes of 4 x 4 MiB),
#   WORKDIR (keep the array image there for the next run of the same SIZE:
#   one model for several invocations), BUILD (build directory, default
#   build-md), SKIP_BUILD=1 (use it as it is), TIER=cpu (smoke test of the
#   flow on a machine without a GPU)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SIZE=${1:-16G}
OUT=${OUT:-/tmp/gpunvme-md-run}
mkdir -p "$OUT"
B=${BUILD:-$ROOT/build-md}
TIER=${TIER:-2}   # TIER=cpu: the same flow through the CPU data path (a smoke test without a GPU)
if [ -n "${WORKDIR:-}" ]; then
	W=$WORKDIR
	mkdir -p "$W"
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-md.XXXXXX")
	trap 'rm -rf "$W"' EXIT
fi
log() { echo "md_run: $*" | tee -a "$OUT/md_run.log" >&2; }
[ -n "${SKIP_BUILD:-}" ] || {
	cmake -S "$ROOT" -B "$B" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 &&
		cmake --build "$B" -j "$(nproc)" --target gpunvme-cli gpunvme-mkmodel bench_gpu_bw
} > "$OUT/build.log" 2>&1 || { tail -n 30 "$OUT/build.log" >&2; exit 1; }
echo "# $(date -u) $(nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.max,pcie.link.width.max --format=csv,noheader 2>/dev/null) cpus=$(nproc) size=$SIZE" | tee "$OUT/summary.csv"
# the GPU's PCIe link in GB/s (per direction, after 128b/130b encoding)
LINK=$(nvidia-smi --query-gpu=pcie.link.gen.max,pcie.link.width.max --format=csv,noheader,nounits 2>/dev/null | head -n 1 |
	awk -F', *' '{ gt = ($1 == 5) ? 32 : ($1 == 4) ? 16 : ($1 == 6) ? 64 : 8; printf "%.1f", gt * $2 * 128 / 130 / 8 }')
LINK=${LINK:-63.0}
# what the link carries in practice: cudaMemcpy from pinned memory (bench_gpu_bw -m memcpy, best of 3)
# (256 MiB pieces: the link, not the per-call cost of 2 MiB ones; the
# method's name is cudaMemcpy-pinned: an earlier pattern missed it and the
# nominal figure stood in for the measurement)
MEMCPY=$("$B/bin/bench_gpu_bw" -m memcpy -s 4G -c 256M -r 3 -H 2> "$OUT/memcpy.err" | tee "$OUT/memcpy.csv" |
	awk -F, 'NR > 1 && $1 ~ /^cudaMemcpy/ { print $10; exit }')
[ -n "$MEMCPY" ] || log "pinned cudaMemcpy not measured (see $OUT/memcpy.err): the nominal link stands in"
MEMCPY=${MEMCPY:-$LINK}
log "PCIe link ${LINK} GB/s (gen x width), ${MEMCPY} GB/s measured (pinned cudaMemcpy)"
if [ ! -s "$W/array.img" ] || [ "$(cat "$W/size" 2>/dev/null)" != "$SIZE" ]; then
	mkdir -p "$W/root"
	"$B/bin/gpunvme-mkmodel" --format safetensors --size "$SIZE" --seed 1 -o "$W/root/model.safetensors" > "$OUT/mkmodel.log" 2>&1 ||
		{ cat "$OUT/mkmodel.log" >&2; exit 1; }
	FSZ=$(stat -c %s "$W/root/model.safetensors")
	# whole stripes of up to 4 members x 4 MiB chunks (CHUNK up to 4096):
	# md_mkraid0.py drops a partial last stripe, and CHUNK=2048 on an image
	# of 4 MiB multiples cut off the file system's end (run 19:14)
	truncate -s $(( (FSZ + FSZ / 16 + (256 << 20)) / 16777216 * 16777216 )) "$W/array.img"
	mkfs.ext4 -q -F -b 4096 -E stride=128,stripe_width=512 -d "$W/root" "$W/array.img" > "$OUT/mkfs.log" 2>&1 ||
		{ cat "$OUT/mkfs.log" >&2; exit 1; }
	rm -f "$W/root/model.safetensors"
	echo "$SIZE" > "$W/size"
fi
MODEL=${MODEL-"read_mbps=14000&iops=2500000&latency_us=60"}
CHUNK=${CHUNK:-512}
echo "members,bytes,seconds,gbps,storage_gbps,link_gbps,pct_of_min,measured_link_gbps,pct_of_min_measured,verified,workers_per_member,queues_per_member" | tee -a "$OUT/summary.csv"
PREV=
for RUN in ${MEMBERS:-1 2 4}; do
	N=${RUN%%:*}
	if [ "$N" != "$PREV" ]; then
		rm -f "$W"/m*.img
		python3 "$ROOT/bench/md_mkraid0.py" "$W/array.img" "$N" "$CHUNK" "$W/m" >> "$OUT/mkraid0.log" 2>&1 ||
			{ log "md_mkraid0.py failed (see $OUT/mkraid0.log)"; exit 1; }
	fi
	PREV=$N
	# emulator workers: the machine's cores shared by the members (2..8 each)
	WK=$(( $(nproc) / N ))
	[ "$WK" -ge 2 ] || WK=2
	[ "$WK" -le 8 ] || WK=8
	case $RUN in *:*) WK=${RUN#*:} WK=${WK%%:*} ;; esac
	Q=${QUEUES:-16}
	case $RUN in *:*:*) Q=${RUN##*:} ;; esac
	U=
	if [ -n "${ONECTRL:-}" ]; then
		# every member a namespace of ONE emulated controller (workers
		# and copy lanes shared, one device model of N x the rate): what
		# separates the emulator's per-controller costs from the
		# loader's per-member ones (docs/md.md, the 4-member cap)
		NS=
		for ((k = 1; k < N; k++)); do NS="$NS&ns=$W/m$k.img"; done
		M1=${MODEL//read_mbps=14000/read_mbps=$((14000 * N))}
		C="emu:$W/m0.img?snapshot=1&workers=$WK&mdts=9&nsq=256&mqes=1023$NS${M1:+&$M1}"
		for ((k = N; k >= 1; k--)); do U="$U${U:+;}$C#$k"; done
		WK="${WK}x1"
	else
		for ((k = N - 1; k >= 0; k--)); do
			U="$U${U:+;}emu:$W/m$k.img?snapshot=1&workers=$WK&mdts=9&nsq=64&mqes=1023${MODEL:+&$MODEL}"
		done
	fi
	U="md:$U"
	"$B/bin/gpunvme" ls "$U" / > "$OUT/ls-$N.txt" 2>&1 || { log "N=$N: ls failed: $(tail -n 1 "$OUT/ls-$N.txt")"; continue; }
	extra=()
	[ "$N" -ne 4 ] || [ -n "${VERIFIED4:-}" ] || { extra=(--verify); VERIFIED4=1; }
	if ! "$B/bin/gpunvme" load "$U" /model.safetensors --tier "$TIER" --queues "$Q" ${DEPTH:+--depth $DEPTH} --json "${extra[@]}" > "$OUT/load-$N-w$WK-q$Q.json" 2> "$OUT/load-$N-w$WK-q$Q.err"; then
		log "N=$N: load failed: $(tail -n 1 "$OUT/load-$N-w$WK-q$Q.err")"
		echo "$N,,,,,,,failed" | tee -a "$OUT/summary.csv"
		continue
	fi
	python3 - "$OUT/load-$N-w$WK-q$Q.json" "$N" "$LINK" "$MEMCPY" "$WK" "$Q" <<'PY' | tee -a "$OUT/summary.csv"
import json, sys
d = json.load(open(sys.argv[1]))
n, link, meas = int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
storage = 14.0 * n
print("%d,%d,%.3f,%.2f,%.1f,%.1f,%.1f,%.1f,%.1f,%s,%s,%s" % (n, d["bytes_read"], d["seconds"], d["gbps"], storage, link,
                                                   100.0 * d["gbps"] / min(storage, link), meas,
                                                   100.0 * d["gbps"] / min(storage, meas), d["verified"],
                                                   sys.argv[5], sys.argv[6]))
PY
done
log "done: $OUT/summary.csv"
