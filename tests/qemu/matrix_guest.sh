#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# The combination matrix's "QEMU vfio" column (python/tests/test_matrix.py,
# issue 31), run in the QEMU guest (busybox sh) by scenarios/matrix_vfio.sh:
#   matrix_guest.sh URI PATH SRC
# URI: QEMU's controller bound to vfio-pci (vfio:BDF), its namespace an ext4
# image holding the model at PATH; SRC: the same model, the source file the
# host wrote with gpunvme-mkmodel, copied into the guest.
# Every entry point of the matrix x {cpu, tier1, tier2} gets one line
#   QEMU-DATA matrix | ENTRY | TIER | ran|refused|failed | DETAIL
# A cell runs and compares every byte with SRC, or is refused, and the
# refusal's reason is checked (the program's own message where the program
# refuses; a GPU tier is refused: the guest has no GPU and the guest's
# programs are built without CUDA). The host (matrix_table.py) checks that
# every cell of the matrix has its line and the sha256 of every tensor
# `load --json` printed (between MATRIX-LOAD-JSON-BEGIN/END).
# Exit status 0 when no cell failed.
URI=$1 MPATH=$2 SRC=$3
FAILED=0
T=/tmp/matrix
mkdir -p $T

row() {  # row ENTRY TIER OUTCOME DETAIL
	echo "QEMU-DATA matrix | $1 | $2 | $3 | $4"
	[ "$3" != failed ] || FAILED=1
}
# first line of a file, for a reason or a failure
line1() { head -n 1 "$1" 2>/dev/null | tr -d '\r'; }

# ---- cli cat: the CPU reads the file system; no tier ----------------------
if gpunvme_guest cat "$URI" "$MPATH" > $T/cat.bin 2> $T/cat.err; then
	if cmp -s $T/cat.bin "$SRC"; then
		row "cli cat" cpu ran "every byte equal ($(wc -c < "$SRC") bytes, cmp with the source)"
	else
		row "cli cat" cpu failed "$(cmp $T/cat.bin "$SRC" 2>&1 | head -n 1)"
	fi
else
	row "cli cat" cpu failed "gpunvme cat: rc $?: $(line1 $T/cat.err)"
fi
for t in tier1 tier2; do row "cli cat" $t refused "no tier: cli cat reads on the CPU"; done

# ---- cli load --verify: CPU tier; the GPU tiers are the CLI's refusal -----
if gpunvme_guest load "$URI" "$MPATH" --tier cpu --verify --json --no-progress > $T/load.json 2> $T/load.err; then
	echo MATRIX-LOAD-JSON-BEGIN
	cat $T/load.json
	echo
	echo MATRIX-LOAD-JSON-END
	if grep -q '"verified": *true' $T/load.json && grep -q '"tier": *"cpu"' $T/load.json; then
		row "cli load --verify" cpu ran "verified against the CPU path; tensor sha256 checked on the host"
	else
		row "cli load --verify" cpu failed "--json: not verified on the CPU tier"
	fi
else
	row "cli load --verify" cpu failed "gpunvme load: rc $?: $(line1 $T/load.err)"
fi
for t in 1 2; do
	gpunvme_guest load "$URI" "$MPATH" --tier $t --verify --json --no-progress > $T/load$t.json 2> $T/load$t.err
	rc=$?
	msg=$(line1 $T/load$t.err)
	# the library's one tier policy (tier.h): Tier 1 needs a GPU, Tier 2 a
	# controller that can DMA into GPU memory (vfio cannot)
	want='needs a CUDA GPU'
	[ $t = 1 ] || want='DMA into GPU memory'
	if [ $rc -ne 0 ] && echo "$msg" | grep -q "$want"; then
		row "cli load --verify" tier$t refused "$msg"
	else
		row "cli load --verify" tier$t failed "expected the CLI's refusal ($want): rc $rc: $msg"
	fi
done

# ---- C layer stream (tests/matrix/matrix_stream.c) ------------------------
if matrix_stream_guest "$URI" "$MPATH" "$SRC" cpu > $T/stream.out 2> $T/stream.err; then
	if grep -q 'every byte equal' $T/stream.out; then
		row "C layer stream" cpu ran "$(grep -c 'every byte equal' $T/stream.out) streams (windows 1-3), every byte equal to the source"
	else
		row "C layer stream" cpu failed "no 'every byte equal': $(line1 $T/stream.out)"
	fi
else
	row "C layer stream" cpu failed "matrix_stream: rc $?: $(line1 $T/stream.err)"
fi
for t in 1 2; do
	matrix_stream_guest "$URI" "$MPATH" "$SRC" $t > $T/stream$t.out 2> $T/stream$t.err
	rc=$?
	msg=$(line1 $T/stream$t.out)
	case $rc:$msg in
	77:REFUSED:*) row "C layer stream" tier$t refused "matrix_stream: $msg" ;;
	*) row "C layer stream" tier$t failed "expected matrix_stream's refusal: rc $rc: $msg $(line1 $T/stream$t.err)" ;;
	esac
done

# ---- the Python entry points ----------------------------------------------
# The guest's userspace is busybox in an initramfs (scripts/qemu/mkinitramfs.sh:
# static programs only, no libc): there is no python3 to import the gpunvme
# extension. Checked: a python3 here would make these cells wrong.
if command -v python3 > /dev/null 2>&1; then
	PYREASON=
else
	PYREASON="no Python in the guest (busybox initramfs, static programs only)"
fi
for e in load_file safe_open load_pretrained transformers "Volume.read" "py stream"; do
	for t in cpu tier1 tier2; do
		if [ "$e" = Volume.read ] && [ $t != cpu ]; then
			row "$e" $t refused "no tier: Volume.read reads on the CPU"
		elif [ -n "$PYREASON" ]; then
			row "$e" $t refused "$PYREASON"
		else
			row "$e" $t failed "python3 is in the guest: this cell should run here"
		fi
	done
done
exit $FAILED
