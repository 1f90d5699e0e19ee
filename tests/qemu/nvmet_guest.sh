#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
# Guest side of the NVMe/TCP scenario (scenarios/nvmet.sh), busybox sh:
# Linux's NVMe target (nvmet + nvmet-tcp) set up through configfs, the
# host-to-guest step signals, and the benchmark of the kernel's nvme-tcp
# host against ours on the same target.
#   nvmet_guest.sh net                      loopback + eth0 (QEMU user net)
#   nvmet_guest.sh export DEV...            subsystem $NQN, namespaces 1.. =
#                                           DEVs, port 1: tcp 0.0.0.0:4420
#   nvmet_guest.sh unexport                 drop the subsystem from the port
#                                           (its connections end: the target
#                                           "dies" for the host)
#   nvmet_guest.sh wait_step N DEV SECS     wait until the host wrote
#                                           "GPUNVME-STEP-N" at DEV's byte 0
#   nvmet_guest.sh bench NSID SECS          QD1 4 KiB random-read latency and
#                                           8 x 128 KiB read throughput of the
#                                           kernel's nvme-tcp host and of ours
#                                           (QEMU-DATA bench.* lines)
NQN=nqn.2026-11.io.gpunvme:qemu
CFG=/sys/kernel/config/nvmet
PORT=$CFG/ports/1
set -u

case $1 in
net)
	ifconfig lo 127.0.0.1 up || exit 1
	ifconfig eth0 10.0.2.15 netmask 255.255.255.0 up || exit 1
	;;
export)
	shift
	[ $# -gt 0 ] || { echo "export: no block devices given"; exit 1; }
	grep -q configfs /proc/mounts || mount -t configfs none /sys/kernel/config || exit 1
	[ -d $CFG ] || { echo "no $CFG: nvmet not loaded"; exit 1; }
	S=$CFG/subsystems/$NQN
	mkdir "$S" && echo 1 > "$S/attr_allow_any_host" || exit 1
	n=1
	for d in "$@"; do
		mkdir "$S/namespaces/$n" && echo "$d" > "$S/namespaces/$n/device_path" &&
			echo 1 > "$S/namespaces/$n/enable" || { echo "namespace $n ($d) refused"; exit 1; }
		n=$((n + 1))
	done
	mkdir "$PORT" && echo tcp > "$PORT/addr_trtype" && echo ipv4 > "$PORT/addr_adrfam" &&
		echo 0.0.0.0 > "$PORT/addr_traddr" && echo 4420 > "$PORT/addr_trsvcid" &&
		ln -s "$S" "$PORT/subsystems/$NQN" || { echo "port setup failed"; exit 1; }
	echo "QEMU-DATA nvmet exported $NQN on tcp 0.0.0.0:4420: $*"
	;;
unexport)
	rm "$PORT/subsystems/$NQN" || exit 1
	;;
wait_step)
	n=$(($4 * 10))
	while [ $n -gt 0 ]; do
		dd if="$3" bs=4096 count=1 iflag=direct status=none 2>/dev/null | grep -q "GPUNVME-STEP-$2" && exit 0
		usleep 100000
		n=$((n - 1))
	done
	echo "no step $2 from the host within $4 s"
	exit 1
	;;
bench)
	nsid=$2 secs=$3
	# ours, in this guest, over loopback to the same target
	/tests/gpunvme_guest perf "tcp://127.0.0.1:4420/$NQN" -n "$nsid" -q 1 -o 4K -w randread -t "$secs" |
		sed 's/^/QEMU-DATA bench.ours.qd1 /'
	# two connections, 4 deep each: what the kernel host has in a 2-vCPU
	# guest (one I/O queue per CPU) with 8 reads in flight
	/tests/gpunvme_guest perf "tcp://127.0.0.1:4420/$NQN" -n "$nsid" -Q 2 -q 4 -o 128K -w read -t "$secs" |
		sed "s/^/QEMU-DATA bench.ours.2x4-128k /"
	# the kernel's host: connect through /dev/nvme-fabrics (what nvme-cli does)
	echo "transport=tcp,traddr=127.0.0.1,trsvcid=4420,nqn=$NQN" > /dev/nvme-fabrics || exit 1
	# its namespace appears after Connect and a scan: 10 s on a quiet
	# host, times guest.sh's slowness factor on a busy one
	dev=
	n=$((100 * ${SLOW:-1}))
	while [ $n -gt 0 ] && [ -z "$dev" ]; do
		for c in /sys/class/nvme/nvme*; do
			[ "$(cat "$c/transport" 2>/dev/null)" = tcp ] || continue
			[ -b "/dev/${c##*/}n$nsid" ] && dev=/dev/${c##*/}n$nsid
		done
		usleep 100000
		n=$((n - 1))
	done
	[ -n "$dev" ] || { echo "the kernel's nvme-tcp host made no namespace $nsid"; exit 1; }
	/tests/blkbench "$dev" lat "$secs" | sed 's/^/QEMU-DATA bench.kernel.qd1 /'
	/tests/blkbench "$dev" bw "$secs" | sed 's/^/QEMU-DATA bench.kernel.qd8-128k /'
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/transport" 2>/dev/null)" = tcp ] && echo 1 > "$c/delete_controller"
	done
	exit 0
	;;
*)
	echo "nvmet_guest.sh: unknown command $1"
	exit 2
	;;
esac
