#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The GPU fault soak's "unspecified launch failure" under ctest -j4 (issue
# 30, acceptance 6): soak_gpu rounds beside the other GPU tests, then the
# driver's view (Xid lines in the kernel log) of any failure.
#   OUT=/dir SECONDS_TOTAL=400 bash bench/soak_diag.sh   (after a build into bd/)
# Foreground: soak_gpu --seconds 40 with seeds 1, 2, ... until the time is
# spent; background: the other GPU tests, -j3, over and over (the load the
# failures came under). Failing soak outputs and the Xid lines go to $OUT.
R=${OUT:?set OUT}
mkdir -p "$R"
T=${SECONDS_TOTAL:-400}
end=$(($(date +%s) + T))
(
	while [ "$(date +%s)" -lt "$end" ]; do
		(cd bd && timeout 300 ctest -L gpu -j3 -E 'soak|multiproc' >/dev/null 2>&1)
		echo "background ctest rc $?"
	done
) >"$R/background.txt" 2>&1 &
BG=$!
seed=${SEED0:-1} fails=0 runs=0
while [ $(($(date +%s) + 45)) -lt "$end" ]; do
	# AB=1: alternate the emulator's batched copies off and on, seed by
	# seed (GPUNVME_COPY_BATCH), to see whether the failures follow them
	cb=${GPUNVME_COPY_BATCH:-0}
	[ "${AB:-0}" = 1 ] && cb=$((seed % 2))
	GPUNVME_COPY_BATCH=$cb timeout 150 bd/bin/soak_gpu --seconds 40 --seed "$seed" >"$R/soak.tmp" 2>&1
	rc=$?
	runs=$((runs + 1))
	echo "[up $(cut -d" " -f1 /proc/uptime)] soak seed $seed (batched copies $cb): rc $rc $(grep -E '^result|kernel:|WATCHDOG|no fault;' "$R/soak.tmp" | tr '\n' ' ')"
	if [ $rc -ne 0 ]; then
		fails=$((fails + 1))
		cp "$R/soak.tmp" "$R/soak-fail-seed$seed.txt"
	fi
	seed=$((seed + 1))
done
rm -f "$R/soak.tmp"
wait $BG
echo "soak: $fails of $runs runs failed; background: $(grep -c 'rc 0' "$R/background.txt") clean of $(wc -l <"$R/background.txt")"
{ dmesg 2>&1 | grep -iE 'xid|nvrm|mmu' | tail -40; } >"$R/xid.txt"
echo "kernel log (Xid/NVRM):"; tail -20 "$R/xid.txt"
