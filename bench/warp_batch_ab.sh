#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Issue 32: the loader's scattered reads with each lane waiting for its own
# completion (gpunvme_dev_rw_warp, the default) against warp batches
# (GPUNVME_GPU_WARP_BATCH=1: gpunvme_dev_rw_lanes), in the same run:
# `gpunvme load --tier 2` of a SIZE (3G) model from an ext4 image file, page
# cache warm, in process and through the DMA process, REP (3) rounds
# alternating, with GPUNVME_EMU_PROFILE=1's burst sums (the share of a load's
# time the emulator's workers found commands).
#   OUT=/dir BD=build-gpu bash bench/warp_batch_ab.sh
set -u
R=${OUT:?set OUT}
B=${BD:-build-gpu}/bin
W=$(mktemp -d /tmp/wbab.XXXXXX)
mkdir -p "$R" "$W/tree"
"$B/gpunvme-mkmodel" --format safetensors --size "${SIZE:-3G}" --seed 5 -o "$W/tree/m.safetensors" >/dev/null
sz=$(du -sb "$W/tree" | cut -f1)
truncate -s $(((sz + sz / 16 + (256 << 20)) / 1048576 * 1048576)) "$W/e.img"
mkfs.ext4 -q -F -d "$W/tree" "$W/e.img" || { echo "mkfs failed"; exit 1; }
cat "$W/e.img" >/dev/null
for r in $(seq "${REP:-3}"); do
	for mode in inproc process; do
		for wb in 0 1; do
			GPUNVME_GPU_WARP_BATCH=$wb GPUNVME_EMU_DMA=$mode GPUNVME_EMU_PROFILE=1 timeout 60 "$B/gpunvme" load \
				"emu:$W/e.img" /m.safetensors --tier 2 --no-progress >"$W/one.log" 2>&1
			rc=$?
			cat "$W/one.log" >>"$R/warp_batch_ab.log"
			line=$(grep -o "in [0-9.]* s, [0-9.]* GB/s" "$W/one.log")
			burst=$(awk '/worker [0-9]+:/ { for (i = 1; i <= NF; i++) if ($i == "burst") { s += $(i + 1); b += $(i + 3) } }
				END { if (s) printf "workers busy %.0f %% of their last bursts", 100 * b / s }' "$W/one.log")
			echo "round $r $mode warp_batch=$wb: $line, $burst rc=$rc"
		done
	done
done | tee "$R/warp_batch_ab.txt"
rm -rf "$W"
