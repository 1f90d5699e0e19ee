#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Host-side runner of the QEMU tests: boot a Linux guest (TCG) with emulated
# NVMe controllers and run statically linked test programs inside it.
#
# Usage: tests/qemu/run.sh -s SCENARIO [-c CACHE] [-w WORKDIR] [-t SECONDS]
#                          [-p PLAN] [-k] [-v] [BINARY...]
#   -s  scenario: a name in tests/qemu/scenarios/ (vfio, uio ...) or a path;
#       it declares the machine, the NVMe controllers and the guest plan
#   -c  cache prepared by scripts/qemu/setup.sh (default: $GPUNVME_QEMU_CACHE,
#       else build/qemu-cache in the source tree)
#   -w  work directory for disk images, initramfs, plan and serial log
#       (default: a fresh directory under ${TMPDIR:-/tmp}, removed on success)
#   -t  hard time limit for the whole guest run (default 600)
#   -p  plan file to use instead of the scenario's plan
#   -k  keep everything (default: disk images deleted after a passing run)
#   -v  copy the serial console to stdout while the guest runs
#   BINARY  test executables, statically linked; in the guest they are in
#       /tests (on PATH) and the plan refers to them by name
# Exit status: 0 when the guest reports QEMU-RESULT PASS, 77 when QEMU or the
# cached kernel is missing (skipped), 1 otherwise (log tail printed).
#
# Scenario files are bash, sourced here; they call:
#   machine iommu|iommu-dma|none
#                             q35 with intel-iommu (intremap, caching-mode)
#                             and intel_iommu=on (iommu: kernel drivers in
#                             passthrough, iommu=pt; iommu-dma: kernel drivers
#                             translated, strict IOTLB invalidation), or q35
#                             without IOMMU
#   nvme_ctrl [KEY=VAL]...    one controller with one namespace. Keys:
#                             size (64M), lbs (512|4096), mdts, ioq
#                             (max_ioqpairs), serial, image (a file copied
#                             as the namespace's contents; size is its size),
#                             read_mbps (QEMU block throttling of reads: a slow
#                             device)
#   nvme_subsys [serial=S] [mdts=N] [ioq=N] ns=SIZE:LBS [ns=SIZE:LBS]...
#                             controller in an NVM subsystem with several
#                             namespaces (nsid 1, 2 ... in order)
#   append ARGS...            extra kernel command line
#   modules NAME...           guest kernel modules to load at boot (default:
#                             mkinitramfs.sh's list)
#   guest_file SRC:DEST       copy a host file into the guest
#   ivshmem SIZE              an ivshmem-plain device at 00:10.0 whose BAR2 is
#                             $WORK/ivshmem.bin (SIZE, a power of two) on the host
#   host_check <<'EOF' ... EOF  bash run on the host after a passing guest run
#                             (WORK and ROOT are exported, and BIN_<name> for each
#                             BINARY); its failure fails the test
#   memory SIZE               guest memory (default 1G)
#   netfwd HOSTPORT GUESTPORT a virtio NIC on QEMU user networking (restricted:
#                             no way out of the guest) with 127.0.0.1:HOSTPORT
#                             on the host forwarded to the guest's GUESTPORT
#   modules NAME...           kernel modules to load besides the default set
#   plan <<'EOF' ... EOF      guest plan, see tests/qemu/guest.sh
# shellcheck disable=SC2317  # the scenario DSL functions are called by sourced files
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
SCENARIO=
CACHE=${GPUNVME_QEMU_CACHE:-$ROOT/build/qemu-cache}
WORK=
TMO=600
PLAN_OVERRIDE=
KEEP=0
VERBOSE=0
while getopts "s:c:w:t:p:kvh" opt; do
	case $opt in
	s) SCENARIO=$OPTARG ;;
	c) CACHE=$OPTARG ;;
	w) WORK=$OPTARG ;;
	t) TMO=$OPTARG ;;
	p) PLAN_OVERRIDE=$OPTARG ;;
	k) KEEP=1 ;;
	v) VERBOSE=1 ;;
	h) sed -n '2,40p' "$0"; exit 0 ;;
	*) exit 1 ;;
	esac
done
shift $((OPTIND - 1))
BINARIES=("$@")

log() { echo "qemu-run: $*"; }
# GPUNVME_QEMU_REQUIRED=1 (CI): what would be a skip is a failure.
skip() {
	if [ "${GPUNVME_QEMU_REQUIRED:-0}" = 1 ]; then log "FAIL (GPUNVME_QEMU_REQUIRED=1): $*"; exit 1; fi
	log "SKIP: $*"; exit 77
}

[ -n "$SCENARIO" ] || { echo "usage: $0 -s SCENARIO [-c CACHE] [-w WORKDIR] [-t SECONDS] [BINARY...]" >&2; exit 1; }
case $SCENARIO in
*/*) SCN_FILE=$SCENARIO ;;
*) SCN_FILE=$HERE/scenarios/$SCENARIO.sh ;;
esac
[ -f "$SCN_FILE" ] || { log "no scenario $SCN_FILE" >&2; exit 1; }

QEMU=${QEMU:-qemu-system-x86_64}
command -v "$QEMU" >/dev/null 2>&1 || skip "$QEMU not installed (scripts/qemu/setup.sh CACHE_DIR installs it)"
command -v cpio >/dev/null 2>&1 || skip "cpio not installed"
[ -s "$CACHE/vmlinuz" ] && [ -x "$CACHE/busybox" ] && [ -s "$CACHE/modules/modules.dep" ] ||
	skip "no guest kernel in $CACHE (run scripts/qemu/setup.sh $CACHE)"
[ "$(uname -m)" = x86_64 ] || skip "host is not x86_64"

AUTO_WORK=0
if [ -z "$WORK" ]; then
	WORK=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-qemu.XXXXXX")
	AUTO_WORK=1
else
	# shellcheck source=tests/qemu/workdir.sh
	. "$HERE/workdir.sh"
	claim_workdir
	AUTO_WORK=$WORK_PRIVATE
	mkdir -p "$WORK"
	rm -f "$WORK"/*.img "$WORK/serial.log" "$WORK/plan"
fi
WORK=$(cd "$WORK" && pwd)
LOG=$WORK/serial.log

# ---- scenario DSL ---------------------------------------------------------
IOMMU=none
MEM=1G
APPEND_EXTRA=()
DEVARGS=()
NETARGS=()
EXTRA_MODS=()
NCTRL=0
NDRIVE=0
FRESH=()         # PATH SIZE IMAGE triples: fresh_file again gives a re-run fresh disks
MODARGS=()
FILEARGS=()
: > "$WORK/plan"
# "INDEX NAMESPACES" per controller, for the guest's `bind nvme` (it waits
# for that many block devices: /etc/nscount)
: > "$WORK/nscount"
rm -f "$WORK/host_check.sh" "$WORK/ivshmem.bin"

machine() { IOMMU=$1; }
modules() { local m; for m in "$@"; do MODARGS+=(-m "$m"); done; }
guest_file() { FILEARGS+=(-f "$1"); }
# fresh_file PATH SIZE [IMAGE]: PATH as a copy of IMAGE, or SIZE bytes of zeroes
fresh_file() {
	rm -f "$1"
	if [ -n "${3:-}" ]; then
		cp --sparse=always "$3" "$1"
	else
		truncate -s "$2" "$1"
	fi
	FRESH+=("$1" "$2" "${3:-}")
}
ivshmem() {
	fresh_file "$WORK/ivshmem.bin" "$1"
	DEVARGS+=(-object "memory-backend-file,id=ivmem,share=on,mem-path=$WORK/ivshmem.bin,size=$1"
		-device "ivshmem-plain,memdev=ivmem,addr=0x10")
}
host_check() { cat >> "$WORK/host_check.sh"; }
memory() { MEM=$1; }
append() { APPEND_EXTRA+=("$@"); }
netfwd() {
	# restrict=on: the guest reaches nothing outside; hostfwd still works
	NETARGS=(-netdev "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:$1-:$2" -device virtio-net-pci,netdev=net0)
}
modules() { EXTRA_MODS+=("$@"); }
plan() { cat >> "$WORK/plan"; }
new_drive() {  # new_drive SIZE [IMAGE] [DRIVE_OPTS] -> sets DRIVE_ID
	local img=$WORK/disk$NDRIVE.img
	fresh_file "$img" "$1" "${2:-}"
	DRIVE_ID=nvm$NDRIVE
	DEVARGS+=(-drive "file=$img,if=none,id=$DRIVE_ID,format=raw,cache=unsafe${3:+,$3}")
	NDRIVE=$((NDRIVE + 1))
}
ctrl_props() {  # common controller properties from KEY=VAL args -> CTRL_PROPS
	local kv
	CTRL_PROPS="serial=gpunvme$NCTRL"
	for kv in "$@"; do
		case $kv in
		serial=*) CTRL_PROPS="${CTRL_PROPS/serial=gpunvme$NCTRL/$kv}" ;;
		mdts=*) CTRL_PROPS+=",$kv" ;;
		ioq=*) CTRL_PROPS+=",max_ioqpairs=${kv#ioq=}" ;;
		size=*|lbs=*|ns=*|image=*|read_mbps=*) ;;
		*) log "scenario: unknown controller key $kv" >&2; exit 1 ;;
		esac
	done
	# 00:04.0, 00:05.0 ... on the root bus: stable BDFs in the guest.
	CTRL_PROPS+=",addr=$(printf '0x%x' $((4 + NCTRL))),id=nvme$NCTRL"
}
nvme_ctrl() {
	local kv size=64M lbs=512 image= opts=
	echo "$NCTRL 1" >> "$WORK/nscount"
	for kv in "$@"; do
		case $kv in
		size=*) size=${kv#size=} ;;
		lbs=*) lbs=${kv#lbs=} ;;
		image=*) image=${kv#image=} ;;
		read_mbps=*) opts="throttling.bps-read=$(( ${kv#read_mbps=} * 1000000 ))" ;; # QEMU's block throttling
		esac
	done
	ctrl_props "$@"
	new_drive "$size" "$image" "$opts"
	DEVARGS+=(-device "nvme,$CTRL_PROPS,drive=$DRIVE_ID,logical_block_size=$lbs,physical_block_size=$lbs")
	NCTRL=$((NCTRL + 1))
}
nvme_subsys() {
	local kv nsid=1 size lbs
	echo "$NCTRL $(printf '%s\n' "$@" | grep -c '^ns=')" >> "$WORK/nscount"
	ctrl_props "$@"
	DEVARGS+=(-device "nvme-subsys,id=subsys$NCTRL,nqn=gpunvme-subsys$NCTRL")
	DEVARGS+=(-device "nvme,$CTRL_PROPS,subsys=subsys$NCTRL")
	for kv in "$@"; do
		case $kv in
		ns=*)
			kv=${kv#ns=}
			size=${kv%%:*}
			lbs=${kv#*:}
			[ "$lbs" != "$kv" ] || lbs=512
			new_drive "$size"
			DEVARGS+=(-device "nvme-ns,bus=nvme$NCTRL,drive=$DRIVE_ID,nsid=$nsid,logical_block_size=$lbs,physical_block_size=$lbs")
			nsid=$((nsid + 1))
			;;
		esac
	done
	NCTRL=$((NCTRL + 1))
}

# shellcheck source=/dev/null
. "$SCN_FILE"
[ -z "$PLAN_OVERRIDE" ] || cp "$PLAN_OVERRIDE" "$WORK/plan"
[ "$NCTRL" -gt 0 ] || { log "scenario declares no NVMe controller" >&2; exit 1; }
FILEARGS+=(-f "$WORK/nscount:/etc/nscount")

# ---- initramfs ------------------------------------------------------------
T0=$(date +%s.%N)
MODARGS=()
if [ ${#EXTRA_MODS[@]} -gt 0 ]; then
	for m in vfio vfio_iommu_type1 vfio_pci uio uio_pci_generic nvme nvme_core "${EXTRA_MODS[@]}"; do
		MODARGS+=(-m "$m")
	done
fi
"$ROOT/scripts/qemu/mkinitramfs.sh" -c "$CACHE" -o "$WORK/initrd.gz" -g "$HERE/guest.sh" -p "$WORK/plan" \
	"${MODARGS[@]}" "${FILEARGS[@]}" "${BINARIES[@]}"
T1=$(date +%s.%N)

# ---- machine --------------------------------------------------------------
MACH=(-machine q35)
# no_timer_check: at boot the kernel checks that the IO-APIC timer ticks
# during a busy wait timed by the TSC (timer_irq_works: about 4 jiffies in
# some 40 ms). Under TCG on a loaded host the vCPU thread can be off the CPU
# for that long; the TSC (host time) moves on, the ticks do not come, and
# with interrupt remapping (machine iommu) the kernel panics "timer doesn't
# work through Interrupt-remapped IO-APIC" (seen in the kmod scenarios, and
# in any scenario that boots on a busy machine). Nothing here tests the
# timer's wiring.
KARGS=(console=ttyS0 panic=-1 loglevel=4 nvme_core.multipath=N mitigations=off no_timer_check)
case $IOMMU in
iommu)
	# TCG has no in-kernel irqchip; split keeps the same command line valid
	# under KVM. Interrupt remapping: VFIO type1 refuses devices without it.
	# shellcheck disable=SC2054  # commas belong to QEMU's option syntax
	MACH=(-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on,caching-mode=on)
	# Translation for VFIO comes from VFIO's own domain; iommu=pt only
	# keeps the kernel's drivers (nvme, uio) on identity mappings.
	KARGS+=(intel_iommu=on iommu=pt)
	;;
iommu-dma)
	# shellcheck disable=SC2054
	MACH=(-machine q35,kernel-irqchip=split -device intel-iommu,intremap=on,caching-mode=on)
	# Every device in a translating DMA domain (the kernel module maps
	# through the DMA API); strict: an unmap invalidates the IOTLB before
	# it returns, so an unmapped page is unreachable at once.
	KARGS+=(intel_iommu=on iommu.passthrough=0 iommu.strict=1)
	;;
none) KARGS+=(intel_iommu=off) ;;
*) log "scenario: machine must be iommu, iommu-dma or none" >&2; exit 1 ;;
esac
KARGS+=("${APPEND_EXTRA[@]}")

CMD=("$QEMU" -accel tcg -m "$MEM" -smp 2 -nodefaults -no-user-config -display none -no-reboot
	"${MACH[@]}" -kernel "$CACHE/vmlinuz" -initrd "$WORK/initrd.gz" -append "${KARGS[*]}"
	-serial "file:$LOG" -monitor none "${DEVARGS[@]}" "${NETARGS[@]}")
printf '%q ' "${CMD[@]}" > "$WORK/qemu.cmd"
echo >> "$WORK/qemu.cmd"
log "scenario $(basename "$SCN_FILE" .sh): $NCTRL controller(s), IOMMU $IOMMU, work dir $WORK"
log "$(cat "$WORK/qemu.cmd")"

: > "$LOG"
TAILPID=
if [ "$VERBOSE" -eq 1 ]; then
	tail -n +1 -f "$LOG" &
	TAILPID=$!
fi
set +e
# run_qemu: the guest under its time limit; QRC gets QEMU's exit status, or
# BOOT_HUNG when the guest printed no "QEMU-GUEST kernel" line (our /init's
# first) within BOOT_S (180) s. A boot takes seconds even under TCG; CI once
# waited out a whole scenario's limit (870 s) with an empty serial log
# (qemu.recovery, session 20), a hang before the kernel printed anything.
# Then QEMU is stopped and the scenario runs once more (below).
BOOT_HUNG=250 # not an exit status timeout(1) or QEMU gives
run_qemu() {
	timeout -k 10 "$TMO" "${CMD[@]}" < /dev/null 2> "$WORK/qemu.stderr" &
	local pid=$! t=0
	while [ "$t" -lt "${BOOT_S:-180}" ] && kill -0 "$pid" 2>/dev/null && ! grep -q '^QEMU-GUEST kernel' "$LOG"; do
		sleep 1
		t=$((t + 1))
	done
	if [ "$t" -ge "${BOOT_S:-180}" ] && ! grep -q '^QEMU-GUEST kernel' "$LOG" && kill -0 "$pid" 2>/dev/null; then
		kill -TERM "$pid" 2>/dev/null # timeout(1) passes it on to QEMU
		wait "$pid"
		QRC=$BOOT_HUNG
		return
	fi
	wait "$pid"
	QRC=$?
}
run_qemu
# QEMU itself dying of SIGSEGV/SIGBUS/SIGABRT is QEMU's failure, not a
# guest verdict: Debian's QEMU 7.2 segfaults now and then in
# nvme_rw_complete_cb after the kernel module resets a controller with
# reads in flight behind the emulated IOMMU (kmod_iommu, kmod.kill.a;
# tests/qemu/README.md). Such a run says nothing about the guest: run it
# again, on fresh disks, up to QEMU_CRASH_RUNS (3) runs in all (a crash in 1
# run of 10 then fails a scenario about once in 1000 runs, against once in
# 100 with 2 runs; CI runs several such scenarios), keeping each crashed
# run's log.
# run_again NAME: keep this run's serial log as NAME, run the scenario once
# more on fresh disks
run_again() {
	log "that run's serial log: $WORK/$1"
	cp "$LOG" "$WORK/$1"
	AGAIN=("${FRESH[@]}")
	FRESH=()
	for ((i = 0; i + 2 < ${#AGAIN[@]}; i += 3)); do
		fresh_file "${AGAIN[i]}" "${AGAIN[i + 1]}" "${AGAIN[i + 2]}"
	done
	: > "$LOG"
	run_qemu
}
rm -f "$WORK"/serial.crashed*.log "$WORK"/serial.boothang.log "$WORK"/serial.preinit.log
case $QRC in
134 | 135 | 139)
	for ((run = 2; run <= ${QEMU_CRASH_RUNS:-3}; run++)); do
		log "QEMU crashed (exit $QRC, signal $((QRC - 128))): QEMU's own failure; running the scenario again (run $run)"
		run_again "serial.crashed$((run - 1)).log"
		case $QRC in 134 | 135 | 139) ;; *) break ;; esac
	done
	;;
*)
	# The guest kernel dying in its own boot, before /init (ours) ran, is
	# the distribution kernel's or TCG's failure, not a verdict on this
	# project: nothing of ours (the module included: /init loads it) has
	# run yet. Seen once on 6.12 with 2 vCPUs under TCG: an int3 oops in
	# sched_clock_cpu during early initcalls (static-key patching), then
	# "Fatal exception". Once more, on fresh disks; a second such death
	# fails the test.
	if [ "$QRC" -eq "$BOOT_HUNG" ]; then
		log "the guest printed nothing of /init within ${BOOT_S:-180} s (a boot takes seconds): a hung boot, nothing of ours ran; running the scenario once more"
		run_again serial.boothang.log
	elif ! grep -q '^QEMU-GUEST kernel' "$LOG" && grep -qE 'Kernel panic|Oops|BUG:' "$LOG"; then
		log "the guest kernel died before /init ran (its own boot): running the scenario once more"
		run_again serial.preinit.log
	fi
	[ "$QRC" -eq "$BOOT_HUNG" ] && log "the guest's boot hung again: the scenario fails"
	;;
esac
set -e
T2=$(date +%s.%N)
if [ -n "$TAILPID" ]; then
	sleep 0.2
	kill "$TAILPID" 2>/dev/null || true
	wait "$TAILPID" 2>/dev/null || true
fi

# ---- verdict --------------------------------------------------------------
tr -d '\r' < "$LOG" > "$LOG.txt" && mv "$LOG.txt" "$LOG"
grep -E '^(QEMU-NVME|QEMU-TEST|QEMU-DATA|QEMU-RESULT)' "$LOG" || true
BOOT=$(awk '/^QEMU-GUEST kernel/ { print; exit }' "$LOG")
awk -v a="$T0" -v b="$T1" -v c="$T2" -v rc="$QRC" \
	'BEGIN { printf "qemu-run: initramfs %.1f s, guest run %.1f s, qemu exit %d\n", b - a, c - b, rc }'
if [ -s "$WORK/qemu.stderr" ]; then
	log "QEMU's messages ($WORK/qemu.stderr):"
	head -n 20 "$WORK/qemu.stderr" | sed 's/^/  ! /'
fi
if [ "$QRC" -eq 124 ] || [ "$QRC" -eq 137 ]; then
	log "guest did not finish within $TMO s"
fi
HOST_OK=1
if grep -q '^QEMU-RESULT PASS' "$LOG" && ! grep -q '^QEMU-TEST .* FAIL ' "$LOG" && [ -s "$WORK/host_check.sh" ]; then
	log "host check ($WORK/host_check.sh)"
	export WORK ROOT
	for b in "${BINARIES[@]}"; do
		n=$(basename "$b"); n=${n//[^A-Za-z0-9_]/_}
		export "BIN_$n=$(cd "$(dirname "$b")" && pwd)/$(basename "$b")"
	done
	if bash -euo pipefail "$WORK/host_check.sh" 2>&1 | sed 's/^/  host: /'; then
		:
	else
		HOST_OK=0
	fi
fi
if [ "$HOST_OK" -eq 1 ] && grep -q '^QEMU-RESULT PASS' "$LOG" && ! grep -q '^QEMU-TEST .* FAIL ' "$LOG"; then
	if [ "$KEEP" -eq 1 ]; then
		log "PASS (log: $LOG)"
	elif [ "$AUTO_WORK" -eq 1 ]; then
		log "PASS"
		rm -rf "$WORK"
	else
		log "PASS (log: $LOG)"
		rm -f "$WORK"/*.img "$WORK/ivshmem.bin"
	fi
	exit 0
fi
[ -n "$BOOT" ] || log "the guest never reached /init"
log "FAIL; last 60 lines of $LOG:"
tail -n 60 "$LOG" | sed 's/^/  | /'
exit 1
