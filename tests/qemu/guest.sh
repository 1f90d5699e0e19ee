#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# Runs inside the QEMU test guest (busybox sh), started by /init with a plan
# file written by tests/qemu/run.sh. Reports on the console (serial line):
#   QEMU-NVME <idx> <bdf> <vendor>:<device> driver=<drv> iommu_group=<n>(<type>)|none
#                                                             one per controller
#   QEMU-TEST <name> PASS|FAIL|SKIP rc=<rc>                  one per check
#   QEMU-DATA <name> <key>=<value>                           informational
#   QEMU-RESULT PASS|FAIL                                    last line
# The caller powers the guest off afterwards.
#
# Plan file: one command per line; '#' starts a comment line. Each line goes
# through the shell's expansion (eval), so it may use these variables:
#   $NCTRL            number of NVMe controllers (PCI class 0x010802)
#   $BDF0, $BDF1 ...  their addresses, sorted (0000:00:04.0 ...)
#   $GROUP<i>         IOMMU group number (after `bind vfio-pci`)
#   $UIO<i>           uio device name, e.g. uio0 (after `bind uio_pci_generic`)
#   $DISK<i>_<nsid>   block device of namespace <nsid> (after `bind nvme`)
# A controller selector SEL is an index (0, 1 ...), a BDF, or `all`.
#
# Commands:
#   echo TEXT...                 print TEXT
#   require_ctrls N              check: at least N controllers present
#   bind DRIVER SEL...           check: bind to vfio-pci | uio_pci_generic |
#                                nvme (unbinding the current driver first)
#   unbind SEL...                unbind from the current driver
#   hugepages N                  check: reserve N 2 MiB huge pages
#   timeout SECS                 time limit for the following run/sh (def. 120),
#                                times $SLOW (below)
#   run NAME CMD [ARGS...]       check: CMD exits 0 (77 = SKIP)
#   xfail NAME CMD [ARGS...]     check: CMD exits neither 0 nor 77
#   sh NAME 'SHELL CODE'         check: shell code exits 0 (77 = SKIP)
#   mkrand FILE BYTES            FILE := BYTES random bytes (multiple of 4096)
#   kwrite NAME DEV OFFSET FILE  check: dd FILE to block device DEV at byte
#                                OFFSET (multiple of 4096) with O_DIRECT
#   kcmp NAME DEV OFFSET FILE    check: DEV at OFFSET holds FILE's bytes
#                                (O_DIRECT read); prints md5 of both
#   kmd5 NAME DEV OFFSET BYTES   print QEMU-DATA NAME md5=... of a region
#   dmesg_grep NAME REGEX        check: the kernel log (since boot) matches REGEX
#   dmesg [REGEX]                print (matching) kernel log lines
#   dmesg_clean NAME             check: the kernel log (since boot) holds no
#                                kernel report (oops, BUG, WARN, KFENCE, slub
#                                or page-poison corruption, lockdep, RCU
#                                stall, hung task, general protection fault,
#                                refcount_t, list corruption, UBSAN: $KREPORT)
#                                and the kernel is not tainted by one (bad
#                                page, died, warning, soft lockup, machine
#                                check, forced unload: $KTAINT_BAD); the
#                                reports found are printed
# Kernel messages of level warning and worse logged during a step are printed
# after it as "kernel: ..." lines; the console itself is kept quiet.
#   stop_on_fail                 end the plan here if any check failed
#
# Time limits on a busy host. TCG runs the guest on host threads that a
# loaded machine takes off the CPU, while the guest's clock (the host's)
# goes on: everything in the guest takes longer by how busy the host is.
# SLOW, a whole number 1..8 exported to the plan's commands, says by how
# much: the time from the kernel's start to here (/proc/uptime: the boot,
# the module loads) over 5 s, rounded up. (Boot to here took 4-5 s on a
# 2-core host with its cores kept busy, load ~20: 1 there; it grows when a
# guest is starved harder, e.g. several guests at once.) The limits
# that only catch a hang (`timeout`, the waits for a driver's devices) are
# multiplied by it; what a check asserts does not change.

PLAN=${1:-/plan}
PASSES=0
FAILS=0
SKIPS=0
UP=$(cut -d. -f1 /proc/uptime)
SLOW=$(((UP + 4) / 5))
[ "$SLOW" -ge 1 ] || SLOW=1
[ "$SLOW" -le 8 ] || SLOW=8
export SLOW
TMO=120

report() {  # report NAME PASS|FAIL|SKIP RC
	echo "QEMU-TEST $1 $2 rc=$3"
	case $2 in
	PASS) PASSES=$((PASSES + 1)) ;;
	SKIP) SKIPS=$((SKIPS + 1)) ;;
	*) FAILS=$((FAILS + 1)) ;;
	esac
}
check_rc() {  # check_rc NAME RC: 0 pass, 77 skip, else fail
	case $2 in
	0) report "$1" PASS 0 ;;
	77) report "$1" SKIP 77 ;;
	*) report "$1" FAIL "$2" ;;
	esac
}
say() { echo "QEMU-GUEST $*"; }

# Kernel messages: the console only gets emergencies while the plan runs
# (so they cannot split report lines); after each step the new messages are
# appended to /tmp/kmsg.log and the warnings and worse printed as "kernel: ".
kmsg_flush() {
	dmesg -c -r > /tmp/.kmsg 2>/dev/null || return 0
	cat /tmp/.kmsg >> /tmp/kmsg.log
	sed -n 's/^<[0-4]>/kernel: /p' /tmp/.kmsg
	rm -f /tmp/.kmsg
}
echo 1 > /proc/sys/kernel/printk
dmesg -c -r > /tmp/kmsg.boot 2>/dev/null
: > /tmp/kmsg.log
kmsg_all() { cat /tmp/kmsg.boot /tmp/kmsg.log | sed 's/^<[0-9]*>//'; }
# The kernel's own report headers (an ERE over "[ time] text" lines), and the
# taint bits only a report sets: R forced unload 8, M machine check 16, B bad
# page 32 (slub_debug and page_poison findings), D died 128, W warning 512,
# L soft lockup 16384 (O out-of-tree and E unsigned are the module's own).
KREPORT='cut here \]|(WARNING|INFO): (CPU:|possible |inconsistent |suspicious |bad unlock|held lock|lock held|nested lock|Nested lock|task .* blocked)|BUG: |kernel BUG at|\] BUG [^ ]+ \(|Oops: |general protection fault|KFENCE: |UBSAN: |refcount_t: |pagealloc: (memory corruption|single bit error)|list_(add|del) corruption|Bad page (state|map)|rcu: INFO: |stack[- ](protector|guard|end)|Call Trace:|Kernel panic'
KTAINT_BAD=17080

# ---- discovery ----------------------------------------------------------
NCTRL=0
for d in /sys/bus/pci/devices/*; do
	[ "$(cat "$d/class" 2>/dev/null)" = 0x010802 ] || continue
	bdf=${d##*/}
	eval "BDF$NCTRL=$bdf"
	drv=none
	[ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
	grp=none
	if [ -e "$d/iommu_group" ]; then
		grp=$(basename "$(readlink "$d/iommu_group")")
		grp="$grp($(cat "/sys/kernel/iommu_groups/$grp/type" 2>/dev/null))"
	fi
	echo "QEMU-NVME $NCTRL $bdf $(sed 's/^0x//' "$d/vendor"):$(sed 's/^0x//' "$d/device") driver=$drv iommu_group=$grp"
	NCTRL=$((NCTRL + 1))
done

idx_of() {  # idx_of BDF -> index or empty
	i=0
	while [ $i -lt $NCTRL ]; do
		eval "b=\$BDF$i"
		[ "$b" = "$1" ] && { echo $i; return; }
		i=$((i + 1))
	done
}
resolve() {  # resolve SEL... -> "idx" per line
	for s in "$@"; do
		case $s in
		all) i=0; while [ $i -lt $NCTRL ]; do echo $i; i=$((i + 1)); done ;;
		*:*) i=$(idx_of "$s"); if [ -n "$i" ]; then echo "$i"; else say "no NVMe controller $s" >&2; echo x; fi ;;
		*) if [ "$s" -lt "$NCTRL" ] 2>/dev/null; then echo "$s"; else say "no NVMe controller #$s" >&2; echo x; fi ;;
		esac
	done
}
wait_for() {  # wait_for SECONDS TEST-ARGS...: poll `test` every 0.1 s
	n=$(($1 * 10)); shift
	while [ $n -gt 0 ]; do
		test "$@" && return 0
		usleep 100000
		n=$((n - 1))
	done
	test "$@"
}
wait_cmd() {  # wait_cmd SECONDS CMD...: poll a command every 0.1 s
	n=$(($1 * 10)); shift
	while [ $n -gt 0 ]; do
		"$@" && return 0
		usleep 100000
		n=$((n - 1))
	done
	"$@"
}
count_ns() { ls -d "$1"/nvme/nvme*/nvme*n* 2>/dev/null | wc -l; }
has_ns() { [ "$(count_ns "$1")" -ge "${2:-1}" ]; }  # has_ns DEV [N]: N namespaces or more
cur_driver() {
	if [ -e "/sys/bus/pci/devices/$1/driver" ]; then
		basename "$(readlink "/sys/bus/pci/devices/$1/driver")"
	else
		echo none
	fi
}
do_unbind() {  # do_unbind BDF
	dev=/sys/bus/pci/devices/$1
	[ -e "$dev/driver" ] && echo "$1" > "$dev/driver/unbind"
	echo > "$dev/driver_override" 2>/dev/null
	return 0
}

bind_one() {  # bind_one DRIVER IDX -> 0 ok
	drv=$1 i=$2
	eval "bdf=\$BDF$i"
	dev=/sys/bus/pci/devices/$bdf
	[ "$(cur_driver "$bdf")" = "$drv" ] || {
		do_unbind "$bdf"
		echo "$drv" > "$dev/driver_override" || return 1
		echo "$bdf" > /sys/bus/pci/drivers_probe
		wait_for $((10 * SLOW)) -e "$dev/driver" || { say "$bdf: no driver bound"; return 1; }
	}
	got=$(cur_driver "$bdf")
	[ "$got" = "$drv" ] || { say "$bdf: bound to $got, not $drv"; return 1; }
	case $drv in
	vfio-pci)
		[ -e "$dev/iommu_group" ] || { say "$bdf: no IOMMU group"; return 1; }
		g=$(basename "$(readlink "$dev/iommu_group")")
		wait_for $((5 * SLOW)) -c "/dev/vfio/$g" || { say "$bdf: no /dev/vfio/$g"; return 1; }
		eval "GROUP$i=$g"
		say "$bdf vfio-pci group $g: /dev/vfio/$g"
		;;
	uio_pci_generic)
		wait_for $((5 * SLOW)) -d "$dev/uio" || { say "$bdf: no uio device"; return 1; }
		u=$(basename "$(ls -d "$dev"/uio/uio* | head -n 1)")
		wait_for $((5 * SLOW)) -c "/dev/$u" || { say "$bdf: no /dev/$u"; return 1; }
		eval "UIO$i=$u"
		say "$bdf uio_pci_generic: /dev/$u"
		;;
	nvme)
		# Namespaces appear asynchronously after probe, one after the
		# other: wait for as many as the scenario gave the controller
		# (run.sh's /etc/nscount; was: the first, then 1 s for the
		# others, too short on a busy host).
		want=$(awk -v i="$i" '$1 == i { print $2 }' /etc/nscount 2>/dev/null)
		[ -n "$want" ] || want=1
		wait_cmd $((30 * SLOW)) has_ns "$dev" "$want" ||
			{ say "$bdf: nvme bound but $(count_ns "$dev") of $want namespace(s)"; return 1; }
		for ns in "$dev"/nvme/nvme*/nvme*n*; do
			name=${ns##*/}
			nsid=$(cat "$ns/nsid" 2>/dev/null || echo "${name##*n}")
			wait_for $((10 * SLOW)) -b "/dev/$name" || { say "no /dev/$name"; return 1; }
			eval "DISK${i}_$nsid=/dev/$name"
			say "$bdf nvme: nsid $nsid /dev/$name $(($(cat "$ns/size") / 2)) KiB, lbs $(cat "$ns/queue/logical_block_size")"
		done
		;;
	esac
	return 0
}

cmd_bind() {
	drv=$1; shift
	for i in $(resolve "$@"); do
		if [ "$i" = x ]; then report "bind.$drv.unknown" FAIL 1; continue; fi
		eval "bdf=\$BDF$i"
		if bind_one "$drv" "$i"; then report "bind.$drv.$bdf" PASS 0; else report "bind.$drv.$bdf" FAIL 1; fi
	done
}

run_test() {  # run_test NAME MODE CMD...; MODE: pass | xfail
	name=$1 mode=$2; shift 2
	say "run $name: $*"
	t0=$(date +%s)
	timeout -s KILL $((TMO * SLOW)) "$@" < /dev/null
	rc=$?
	say "$name took $(($(date +%s) - t0)) s"
	if [ "$mode" = xfail ]; then
		case $rc in 0|77) report "$name" FAIL "$rc" ;; *) report "$name" PASS "$rc" ;; esac
	else
		check_rc "$name" $rc
	fi
}

blocks4k() {  # bytes -> 4 KiB blocks, failing on a partial block
	[ $(($1 % 4096)) -eq 0 ] || { say "size/offset $1 is not a multiple of 4096"; return 1; }
	echo $(($1 / 4096))
}

run_plan_line() {
	cmd=$1; shift
	case $cmd in
	echo) say "$*" ;;
	require_ctrls)
		if [ "$NCTRL" -ge "$1" ]; then report "ctrls.$1" PASS 0; else
			say "found $NCTRL NVMe controllers, want $1"; report "ctrls.$1" FAIL 1; fi ;;
	bind) cmd_bind "$@" ;;
	unbind)
		for i in $(resolve "$@"); do [ "$i" = x ] || { eval "bdf=\$BDF$i"; do_unbind "$bdf"; }; done ;;
	hugepages)
		echo "$1" > /proc/sys/vm/nr_hugepages
		got=$(cat /proc/sys/vm/nr_hugepages)
		say "nr_hugepages $got"
		if [ "$got" -ge "$1" ]; then report "hugepages.$1" PASS 0; else report "hugepages.$1" FAIL 1; fi ;;
	timeout) TMO=$1 ;;
	run) n=$1; shift; run_test "$n" pass "$@" ;;
	xfail) n=$1; shift; run_test "$n" xfail "$@" ;;
	sh) n=$1; shift; run_test "$n" pass sh -c "$*" ;;
	mkrand)
		c=$(blocks4k "$2") || { report "mkrand.$1" FAIL 1; return; }
		dd if=/dev/urandom of="$1" bs=4096 count="$c" status=none ;;
	kwrite)
		c=$(blocks4k "$(stat -c %s "$4")") && s=$(blocks4k "$3") || { report "$1" FAIL 1; return; }
		dd if="$4" of="$2" bs=4096 seek="$s" count="$c" oflag=direct conv=notrunc,fsync status=none
		rc=$?
		[ $rc -eq 0 ] && { blockdev --flushbufs "$2" 2>/dev/null; sync; }
		say "$1: wrote $4 to $2 at $3 md5 $(md5sum < "$4" | cut -d' ' -f1)"
		check_rc "$1" $rc ;;
	kcmp)
		c=$(blocks4k "$(stat -c %s "$4")") && s=$(blocks4k "$3") || { report "$1" FAIL 1; return; }
		dd if="$2" of=/tmp/.kcmp bs=4096 skip="$s" count="$c" iflag=direct status=none
		a=$(md5sum < /tmp/.kcmp | cut -d' ' -f1)
		b=$(md5sum < "$4" | cut -d' ' -f1)
		echo "QEMU-DATA $1 device=$a file=$b"
		if [ "$a" = "$b" ]; then report "$1" PASS 0; else
			cmp /tmp/.kcmp "$4" | head -n 3; report "$1" FAIL 1; fi
		rm -f /tmp/.kcmp ;;
	kmd5)
		c=$(blocks4k "$4") && s=$(blocks4k "$3") || return
		echo "QEMU-DATA $1 md5=$(dd if="$2" bs=4096 skip="$s" count="$c" iflag=direct status=none | md5sum | cut -d' ' -f1)" ;;
	dmesg_grep)
		n=$1; shift
		kmsg_flush
		if kmsg_all | grep -E "$*" | tail -n 3 | sed 's/^/kernel: /' | grep .; then
			report "$n" PASS 0
		else
			report "$n" FAIL 1
		fi ;;
	dmesg_clean)
		kmsg_flush
		t=$(cat /proc/sys/kernel/tainted 2>/dev/null || echo 0)
		n=$(kmsg_all | grep -cE "$KREPORT")
		echo "QEMU-DATA $1 reports=$n tainted=$t"
		if [ "$n" -eq 0 ] && [ $((t & KTAINT_BAD)) -eq 0 ]; then
			report "$1" PASS 0
		else
			kmsg_all | grep -E -A 12 "$KREPORT" | head -n 80 | sed 's/^/kernel: /'
			report "$1" FAIL 1
		fi ;;
	dmesg)
		kmsg_flush
		if [ $# -gt 0 ]; then kmsg_all | grep -E "$*"; else kmsg_all; fi ;;
	stop_on_fail)
		[ $FAILS -eq 0 ] || { say "stopping: $FAILS check(s) failed"; return 1; } ;;
	*) say "unknown plan command: $cmd"; report "plan.$cmd" FAIL 1 ;;
	esac
	return 0
}

say "$NCTRL NVMe controller(s); plan $PLAN; up $UP s: slowness $SLOW"
exec 3< "$PLAN"
while IFS= read -r line <&3 || [ -n "$line" ]; do
	case $line in ''|'#'*) continue ;; esac
	eval "set -- $line" || { report plan.syntax FAIL 1; continue; }
	[ $# -gt 0 ] || continue
	run_plan_line "$@" || { kmsg_flush; break; }
	kmsg_flush
done
exec 3<&-

if [ $FAILS -gt 0 ]; then
	say "kernel messages since the plan started (last 40):"
	sed 's/^<[0-9]*>/kernel: /' /tmp/kmsg.log | tail -n 40
fi
say "passed $PASSES, failed $FAILS, skipped $SKIPS"
if [ $FAILS -eq 0 ] && [ $PASSES -gt 0 ]; then
	echo "QEMU-RESULT PASS"
else
	echo "QEMU-RESULT FAIL"
fi
