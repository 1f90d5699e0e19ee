#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Several processes on one GPU at once (issue 30, item 6): people run
# several workers per GPU, and a wrong byte delivered without an error
# must not come from sharing it. Each round starts, at the same moment,
#   - the layer stream on Tier 2 and on Tier 1 over every committed mdadm
#     array (test_gpu_md_stream: every byte against the manifest-checked file),
#   - Tier 2 and Tier 1 random loads (test_gpu_loader tier2_random,
#     tier1_random: every byte against the host reference),
#   - injected faults: a media error inside a streamed layer on both GPU tiers
#     (test_gpu_stream failed_read, tier1_failed_read: the layer poisoned,
#     the error reported) and on plain loads (test_gpu_loader faults: -EIO
#     with the status, then good loads again),
#   - the stream's consumer-ordering check (test_gpu_stream window2),
# each process with its own emulated controller(s), all on GPU 0 (compute
# mode Default: the contexts time-share it). Every process must pass, in
# every round.
#   multiproc.sh BIN_DIR FIXTURE_DIR WORK_DIR [ROUNDS]
# Exit 0 pass, 1 fail, 77 no GPU.
set -u
BIN=${1:?usage: multiproc.sh BIN_DIR FIXTURE_DIR WORK_DIR [ROUNDS]}
FX=${2:?}
WORK=${3:?}
ROUNDS=${4:-3}
W=$WORK/multiproc.$$
mkdir -p "$W/t1" "$W/t2"
trap 'rm -rf "$W"' EXIT
JOBS=(
	"$BIN/test_gpu_md_stream 2 $FX $W/t2"
	"$BIN/test_gpu_md_stream 1 $FX $W/t1"
	"$BIN/test_gpu_loader tier2_random"
	"$BIN/test_gpu_loader tier1_random"
	"$BIN/test_gpu_stream failed_read"
	"$BIN/test_gpu_stream tier1_failed_read"
	"$BIN/test_gpu_loader faults"
	"$BIN/test_gpu_stream window2"
)
fails=0
for r in $(seq "$ROUNDS"); do
	pids=()
	for k in "${!JOBS[@]}"; do
		# timeout: a hang is a failure, not a stuck ctest
		timeout -k 5 240 ${JOBS[$k]} >"$W/out.$k" 2>&1 &
		pids+=($!)
	done
	skipped=0
	for k in "${!JOBS[@]}"; do
		wait "${pids[$k]}"
		rc=$?
		if [ $rc -eq 77 ]; then
			skipped=$((skipped + 1))
		elif [ $rc -ne 0 ]; then
			echo "FAIL round $r: ${JOBS[$k]#"$BIN"/} (rc $rc):"
			tail -15 "$W/out.$k"
			fails=$((fails + 1))
		fi
	done
	if [ $skipped -eq ${#JOBS[@]} ]; then
		echo "no CUDA GPU: skipped"
		exit 77
	fi
	echo "round $r: ${#JOBS[@]} processes on one GPU, $fails failure(s) so far"
done
[ $fails -eq 0 ]
