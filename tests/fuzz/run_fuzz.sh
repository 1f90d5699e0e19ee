#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Time-boxed libFuzzer run for ctest: run_fuzz.sh FUZZER SEED_DIR WORK_DIR
# The seeds are copied, so the source tree is never written; new inputs the
# run finds stay in WORK_DIR/corpus, crash reproducers in WORK_DIR/artifacts.
set -euo pipefail
fuzzer=$1 seeds=$2 work=$3
secs=${FUZZ_SECONDS:-20}

rm -rf "$work/corpus"
mkdir -p "$work/corpus" "$work/artifacts"
cp "$seeds"/* "$work/corpus/"
echo "fuzzing $(basename "$fuzzer") for ${secs}s, corpus $work/corpus"
# -timeout: one input may not run longer than 10 s (a hang in the emulator);
# -rss_limit_mb: leaks that do not show as leaks still fail;
# libFuzzer exits non-zero on any crash, leak, timeout or sanitizer report.
exec "$fuzzer" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
	-max_len=4096 -print_final_stats=1 \
	-artifact_prefix="$work/artifacts/" "$work/corpus"
