#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The model loader end to end, on a fresh machine right after the build, with
# no root, no mount and no NVMe hardware:
#   1. gpunvme-mkmodel writes a safetensors model of at least 512 MiB
#      (570 MiB: whole layers; fixed seed);
#   2. mkfs.ext4 -d puts it into an ext4 image, and mkfs.xfs -p (protofile)
#      into an XFS image when xfsprogs is installed;
#   3. each image becomes namespace 1 of the embedded NVMe emulator
#      (emu:IMAGE) and `gpunvme load IMAGE /model.safetensors --verify`
#      resolves the file through the on-disk extents, streams every tensor
#      into GPU memory (tier 2, when `nvidia-smi -L` finds a GPU) or host
#      memory (CPU data path), then reads it all again through the CPU path
#      and compares;
#   4. two tensors are also hashed from the source file with sha256sum and
#      compared with what the loader reports (--json), an independent check.
# Exits non-zero on any failure or mismatch; temporary files (sparse images
# in $TMPDIR) are removed on exit.
#
# Usage: scripts/demo-load.sh [BUILD_DIR]     (default: build)
# Environment: DEMO_SIZE (default 512M), DEMO_TIER (default: 2 with a GPU,
# else cpu).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build}
GPUNVME=$BUILD/bin/gpunvme
MKMODEL=$BUILD/bin/gpunvme-mkmodel
SIZE=${DEMO_SIZE:-512M}
SEED=2024
START=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

step() { printf '\n== %s\n' "$*"; }
die() { echo "demo-load: $*" >&2; exit 1; }
for b in "$GPUNVME" "$MKMODEL"; do
	[ -x "$b" ] || die "$b not found: build first (cmake --build $BUILD --target gpunvme-cli gpunvme-mkmodel)"
done
command -v mkfs.ext4 >/dev/null 2>&1 || die "mkfs.ext4 not found (apt-get install e2fsprogs)"

T=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-demo-load.XXXXXX")
trap 'rm -rf "$T"' EXIT

if [ -n "${DEMO_TIER:-}" ]; then
	TIER=$DEMO_TIER
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
	TIER=2
else
	TIER=cpu
fi

step "1. generate a $SIZE safetensors model (gpunvme-mkmodel, seed $SEED)"
mkdir -p "$T/tree"
MODEL=$T/tree/model.safetensors
t0=$(date +%s.%N)
"$MKMODEL" --format safetensors --size "$SIZE" --seed "$SEED" -o "$MODEL" --manifest "$T/manifest"
BYTES=$(stat -c %s "$MODEL")
echo "$MODEL: $BYTES bytes, $(wc -l < "$T/manifest") tensors, $(elapsed "$t0") s"
head -n 3 "$T/manifest" | awk -F'\t' '{ printf "  %-45s %-8s [%s]\n", $1, $2, $3 }'
echo "  ..."

# image size: the file plus room for metadata (journal, log, inodes), sparse
IMG_MB=$(( BYTES / 1048576 * 115 / 100 + 96 ))
IMAGES=()

step "2a. ext4 image: mkfs.ext4 -d (no root, no mount)"
truncate -s "${IMG_MB}M" "$T/ext4.img"
mkfs.ext4 -q -F -b 4096 -L gpunvme-demo -d "$T/tree" "$T/ext4.img"
echo "$T/ext4.img: ${IMG_MB} MiB ext4, /model.safetensors in" \
	"$("$GPUNVME" extents "emu:$T/ext4.img" /model.safetensors --json |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(len(d["extents"]) if isinstance(d, dict) and "extents" in d else "?")' 2>/dev/null || echo "?") extents"
IMAGES+=("ext4 $T/ext4.img")

step "2b. XFS image: mkfs.xfs -p protofile"
# xfsprogs 6.1's protofile copy writes a file as one run of blocks; a file
# larger than an allocation group overruns the next AG's headers (a corrupt
# image). So: two AGs, each larger than the model, and xfs_repair -n must
# find the result clean, else XFS is skipped with the reason.
XFS_MB=$(( (BYTES / 1048576 + 64) * 2 + 64 ))
[ "$XFS_MB" -ge 320 ] || XFS_MB=320 # mkfs.xfs's minimum is 300 MB
if ! command -v mkfs.xfs >/dev/null 2>&1; then
	echo "skipped: mkfs.xfs not installed (apt-get install xfsprogs)"
else
	# protofile: boot image (unused), blocks/inodes (0 0 = computed), the root
	# directory, then one regular file with its source path
	printf '/dev/null\n0 0\nd--755 0 0\nmodel.safetensors ---644 0 0 %s\n$\n' "$MODEL" > "$T/proto"
	truncate -s "${XFS_MB}M" "$T/xfs.img"
	if ! mkfs.xfs -q -f -d agcount=2 -L gpunvme-demo -p "$T/proto" "$T/xfs.img" > "$T/mkfs.xfs.log" 2>&1; then
		echo "skipped: mkfs.xfs -p refused: $(head -n 2 "$T/mkfs.xfs.log" | tr '\n' ' ')"
	elif command -v xfs_repair >/dev/null 2>&1 && ! xfs_repair -n "$T/xfs.img" > "$T/repair.log" 2>&1; then
		echo "skipped: the image mkfs.xfs -p made is not clean (xfs_repair -n):" \
			"$(grep -m 2 -iE 'bad|error|corrupt' "$T/repair.log" | tr '\n' ' ')"
	else
		echo "$T/xfs.img: ${XFS_MB} MiB XFS, 2 AGs ($(mkfs.xfs -V))"
		IMAGES+=("xfs $T/xfs.img")
	fi
fi

# sha256 of a tensor, straight from the source file (coreutils only)
src_sha() { # OFFSET BYTES
	dd if="$MODEL" bs=1M iflag=skip_bytes,count_bytes skip="$1" count="$2" status=none | sha256sum | cut -d' ' -f1
}
CHECK_TENSORS=$(awk -F'\t' 'NR == 1 { a = $1 } { z = $1 } END { print a "," z }' "$T/manifest")

n=3
for spec in "${IMAGES[@]}"; do
	read -r fs img <<< "$spec"
	step "$n. gpunvme load emu:$img /model.safetensors --tier $TIER --verify ($fs)"
	if [ "$TIER" = cpu ]; then
		echo "(no usable GPU: host memory through the CPU data path)"
	fi
	t0=$(date +%s.%N)
	"$GPUNVME" load "emu:$img" /model.safetensors --tier "$TIER" --verify --no-progress ||
		die "$fs: gpunvme load --verify failed (exit $?)"
	echo "loaded and verified in $(elapsed "$t0") s (wall clock, including the verify pass)"

	step "$n'. cross-check $CHECK_TENSORS against sha256sum of the source file ($fs)"
	"$GPUNVME" load "emu:$img" /model.safetensors --tier "$TIER" --tensors "$CHECK_TENSORS" --json --no-progress \
		2>/dev/null > "$T/load.json" || die "$fs: gpunvme load --json --tensors failed"
	while IFS=$'\t' read -r name off len sha; do
		want=$(src_sha "$off" "$len")
		[ "$sha" = "$want" ] || die "$fs: $name: loader sha256 $sha, source file $want"
		echo "  $name: $len bytes at $off, sha256 ${sha:0:16}... matches"
	done < <(python3 -c 'import json,sys
for t in json.load(open(sys.argv[1]))["tensors"]:
    print("%s\t%d\t%d\t%s" % (t["name"], t["offset"], t["bytes"], t["sha256"]))' "$T/load.json")
	[ "$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tensors"]))' "$T/load.json")" -eq 2 ] ||
		die "$fs: --tensors $CHECK_TENSORS did not select exactly two tensors"
	n=$((n + 1))
done

step "done: ${#IMAGES[@]} image(s), tier $TIER, all tensors verified, $(elapsed "$START") s in all"
