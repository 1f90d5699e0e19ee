#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# The long run of the kernel module's fuzzer (issue 34): the whole kmod QEMU
# scenario (tests/qemu/scenarios/kmod_*.sh, hostile-use scenarios included)
# with tests/qemu/kmod_fuzz.c running SECONDS instead of CI's 60, then a
# record in bench/results/kmod-fuzz-<date>/README.md: seed, iterations,
# ioctls, maps, reads, the verdicts of the kernel-log and DMAR checks.
#
# Usage: bench/kmod_fuzz_run.sh [-m iommu|noiommu] [-s SECONDS] [-S SEED]
#                               [-c KMOD_CACHE] [-b BUILD_DIR] [-o OUTDIR]
#   -m  IOMMU mode: iommu (intel-iommu translating, default) or noiommu
#   -s  fuzz time (default 1800: 30 minutes)
#   -S  seed (default: a new one, printed and recorded; give it to replay)
#   -c  scripts/qemu/setup.sh --generic cache (default BUILD_DIR/qemu-cache-kmod)
#   -b  the cmake build directory with kmod_fuzz, kmod_test, qemu_driver,
#       gpunvme_guest built (default build/)
#   -o  results directory (default bench/results/kmod-fuzz-$(date +%F))
# Exit status: that of the guest run (0 pass).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
MODE=iommu
SECS=1800
SEED=0
BUILD=$ROOT/build
CACHE=
OUT=
while getopts "m:s:S:c:b:o:h" o; do
	case $o in
	m) MODE=$OPTARG ;;
	s) SECS=$OPTARG ;;
	S) SEED=$OPTARG ;;
	c) CACHE=$OPTARG ;;
	b) BUILD=$OPTARG ;;
	o) OUT=$OPTARG ;;
	h) sed -n '2,19p' "$0"; exit 0 ;;
	*) exit 1 ;;
	esac
done
case $MODE in iommu | noiommu) ;; *) echo "kmod_fuzz_run: -m iommu|noiommu" >&2; exit 1 ;; esac
CACHE=${CACHE:-$BUILD/qemu-cache-kmod}
OUT=${OUT:-$ROOT/bench/results/kmod-fuzz-$(date +%F)}
BIN=$BUILD/bin
for b in kmod_fuzz kmod_test qemu_driver gpunvme_guest; do
	[ -x "$BIN/$b" ] || { echo "kmod_fuzz_run: no $BIN/$b (cmake --build $BUILD --target $b)" >&2; exit 1; }
done
WORK=$BUILD/tests/qemu/work/kmod_fuzz_long_$MODE
KO=$BUILD/tests/qemu/kmod-guest
"$ROOT/scripts/kmod-build.sh" "$CACHE/kdir" "$KO"
mkdir -p "$OUT"
# the sources the guest runs: taken now, the tree may move on during the run
REV=$(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet HEAD -- kmod tests/qemu include || echo ' (+ local changes)')
T0=$(date +%s)
set +e
# the guest's limit: the fuzz time, the rest of the plan (some 3 minutes
# on a 2-core host) and room for a slow host
GPUNVME_KMOD_KO=$KO/gpunvme.ko GPUNVME_KMOD_FUZZ_SECONDS=$SECS GPUNVME_KMOD_FUZZ_SEED=$SEED \
	"$ROOT/tests/qemu/run.sh" -s "kmod_$MODE" -c "$CACHE" -w "$WORK" -t $((SECS + 900)) -k \
	"$BIN/qemu_driver" "$BIN/kmod_test" "$BIN/gpunvme_guest" "$BIN/kmod_fuzz" > "$OUT/run-$MODE.log" 2>&1
RC=$?
set -e
T1=$(date +%s)
LOG=$WORK/serial.log
RES=$(grep -m1 '^kmod_fuzz: RESULT' "$LOG" || echo "kmod_fuzz: RESULT (none: the fuzzer did not finish)")
FIRST=$(grep -m1 '^kmod_fuzz: seed' "$LOG" || true)
grep -E '^(QEMU-TEST|QEMU-RESULT)|^kmod_fuzz:|^FAIL|DMAR faults:' "$LOG" > "$OUT/guest-$MODE.txt" || true
VERDICT=FAIL
[ $RC -eq 0 ] && VERDICT=PASS
{
	echo "# kmod fuzzer, $((SECS / 60)) minutes, IOMMU $MODE ($(date +%F))"
	echo
	echo "\`bench/kmod_fuzz_run.sh -m $MODE -s $SECS\` on $(uname -n) ($(nproc) cores), guest kernel"
	echo "$(cat "$CACHE/kernel.version" 2>/dev/null || echo '?') under QEMU TCG, module from commit"
	echo "$REV."
	echo
	echo "| | |"
	echo "| --- | --- |"
	echo "| result | **$VERDICT** (run.sh exit $RC, $((T1 - T0)) s wall) |"
	echo "| fuzzer | \`${FIRST#kmod_fuzz: }\` |"
	echo "| totals | \`${RES#kmod_fuzz: RESULT }\` |"
	for t in kmod.fuzz kmod.fuzz.after-selftest kmod.hostile.no-dmar-fault kmod.kernel-log-clean; do
		echo "| $t | $(grep -m1 "^QEMU-TEST $t " "$LOG" | awk '{print $3}') |"
	done
	echo "| DMAR faults (before, after the hostile section) | $(grep -m1 '^DMAR faults:' "$LOG" | sed 's/^DMAR faults: //') |"
	echo
	echo "The oracle: the fuzzer's own checks (errnos, the returned tables, guarded"
	echo "reads, \`pinned\` and VmLck back to their start after close), the kernel log"
	echo "free of oops/BUG/WARNING/KFENCE/lockdep/refcount reports (kmod.kernel-log-clean),"
	echo "no new DMAR fault (kmod.hostile.no-dmar-fault), and the driver's selftest on the"
	echo "fuzzed controller afterwards. Replay: \`-S <seed>\` (thread interleavings differ)."
	echo "The guest's report lines: guest-$MODE.txt; run.sh's output: run-$MODE.log."
} > "$OUT/README.md"
cat "$OUT/README.md"
exit $RC
