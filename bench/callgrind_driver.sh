#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Instructions the driver spends per 4 KiB read (submit + completion), the
# emulator excluded: callgrind counts only inside gpunvme_read and
# gpunvme_qpair_poll. Usage: bench/callgrind_driver.sh [BUILD_DIR] [READS]
set -euo pipefail
B=${1:-build}
N=${2:-20000}
command -v valgrind >/dev/null || { echo "valgrind not installed (apt-get install valgrind)"; exit 77; }
for batch in 1 32; do
	out=$(mktemp)
	valgrind --tool=callgrind --callgrind-out-file="$out" \
		--toggle-collect=gpunvme_read --toggle-collect=gpunvme_qpair_poll \
		"$B/bin/bench_driver_instr" -n "$N" -b "$batch" >/dev/null 2>&1
	ir=$(callgrind_annotate "$out" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",","",$1); print $1}')
	echo "batch $batch: $ir instructions for $N reads = $((ir / N)) per read (submit + completion)"
	rm -f "$out"
done
