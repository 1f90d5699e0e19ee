#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Reserve 2 MiB hugepages for DMA memory (needed by uio:, used by vfio: for
# buffers of 2 MiB and more) and show how many are free.
#
# Usage: sudo scripts/hugepages.sh [--node N] [COUNT]
#   COUNT      total number of 2 MiB pages to reserve (e.g. 512 = 1 GiB);
#              without it, only show the current state
#   --node N   reserve on NUMA node N (the SSD's node: see
#              /sys/bus/pci/devices/BDF/numa_node) instead of system-wide
#
# The reservation lasts until reboot; for a permanent one add
# hugepages=COUNT to the kernel command line, or vm.nr_hugepages to sysctl.
set -euo pipefail

usage() { sed -n '3,13p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "hugepages: $*" >&2; exit 1; }

NODE=
COUNT=
while [ $# -gt 0 ]; do
	case "$1" in
	--node) [ $# -ge 2 ] || usage; NODE=$2; shift ;;
	-h|--help) usage ;;
	-*) echo "hugepages: unknown option $1" >&2; usage ;;
	*) [ -z "$COUNT" ] || usage; COUNT=$1 ;;
	esac
	shift
done

if [ -n "$NODE" ]; then
	[[ $NODE =~ ^[0-9]+$ ]] || die "--node takes a number, not '$NODE'"
	HP=/sys/devices/system/node/node$NODE/hugepages/hugepages-2048kB
	WHERE="node $NODE"
else
	HP=/sys/kernel/mm/hugepages/hugepages-2048kB
	WHERE="system"
fi
[ -d "$HP" ] || die "$HP does not exist: this kernel has no 2 MiB hugepages (CONFIG_HUGETLBFS) or no such NUMA node"

if [ -n "$COUNT" ]; then
	[[ $COUNT =~ ^[0-9]+$ ]] || die "COUNT must be a number of 2 MiB pages, not '$COUNT'"
	[ "$(id -u)" -eq 0 ] || die "needs root: sudo $0 ${NODE:+--node $NODE }$COUNT"
	echo "$COUNT" > "$HP/nr_hugepages"
	GOT=$(cat "$HP/nr_hugepages")
	if [ "$GOT" -lt "$COUNT" ]; then
		echo "hugepages: only $GOT of $COUNT pages could be reserved ($WHERE): memory is fragmented or short;" \
			"try again, free memory (echo 3 > /proc/sys/vm/drop_caches; echo 1 > /proc/sys/vm/compact_memory)," \
			"or reserve at boot with hugepages=$COUNT" >&2
	fi
fi

TOTAL=$(cat "$HP/nr_hugepages")
FREE=$(cat "$HP/free_hugepages")
echo "2 MiB hugepages ($WHERE): $TOTAL reserved, $FREE free ($((FREE * 2)) MiB free)"
if [ -z "$NODE" ] && [ -d /sys/devices/system/node/node1 ]; then
	for n in /sys/devices/system/node/node[0-9]*; do
		h=$n/hugepages/hugepages-2048kB
		[ -d "$h" ] && echo "  ${n##*/}: $(cat "$h/nr_hugepages") reserved, $(cat "$h/free_hugepages") free"
	done
fi
if [ -n "$COUNT" ] && [ "$TOTAL" -lt "$COUNT" ]; then
	exit 1
fi
exit 0
