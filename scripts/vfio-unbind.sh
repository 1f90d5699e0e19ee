#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Give an NVMe controller back to the kernel's nvme driver (after
# scripts/vfio-bind.sh, or after using it through uio_pci_generic).
#
# Usage: sudo scripts/vfio-unbind.sh [--driver DRV] BDF
#   BDF           PCI address, DDDD:BB:DD.F or BB:DD.F
#   --driver DRV  bind to DRV instead of nvme (e.g. none: leave it unbound)
#
# The process using the device (gpunvme, a VM) must have exited: unbinding
# vfio-pci waits for every open file of the device to close.
set -euo pipefail

usage() { sed -n '3,11p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "vfio-unbind: $*" >&2; exit 1; }
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib-pci.sh"

TARGET=nvme
BDF=
while [ $# -gt 0 ]; do
	case "$1" in
	--driver) [ $# -ge 2 ] || usage; TARGET=$2; shift ;;
	-h|--help) usage ;;
	-*) echo "vfio-unbind: unknown option $1" >&2; usage ;;
	*) [ -z "$BDF" ] || usage; BDF=$1 ;;
	esac
	shift
done
[ -n "$BDF" ] || usage

ADDR=$(pci_bdf "$BDF") ||
	die "'$BDF' is not a PCI address: expected DDDD:BB:DD.F, e.g. 0000:01:00.0"
BDF=$ADDR
[ "$(id -u)" -eq 0 ] || die "needs root: sudo $0 $BDF"

DEV=/sys/bus/pci/devices/$BDF
[ -e "$DEV" ] || die "no PCI device $BDF: lspci -D -nn | grep -i nvme"
driver_of() { pci_driver_of "$BDF"; }

CUR=$(driver_of)
if [ "$CUR" = "$TARGET" ]; then
	echo "vfio-unbind: $BDF is already bound to $TARGET"
	exit 0
fi
# An empty override lets the normal ID match pick the driver again.
echo > "$DEV/driver_override"
if [ "$CUR" != none ]; then
	echo "vfio-unbind: unbinding $BDF from $CUR"
	# Blocks while a process still holds the VFIO device open.
	timeout 30 sh -c "echo '$BDF' > '$DEV/driver/unbind'" ||
		die "unbinding from $CUR did not finish in 30 s: is a gpunvme process or a VM still using $BDF?"
fi
[ "$TARGET" = none ] && { echo "vfio-unbind: $BDF left without a driver"; exit 0; }

modprobe "$TARGET" 2>/dev/null || true
echo "$TARGET" > "$DEV/driver_override"
echo "$BDF" > /sys/bus/pci/drivers_probe || true
for _ in $(seq 100); do [ "$(driver_of)" = "$TARGET" ] && break; sleep 0.1; done
# Leave no override behind: later hot-plug or rebinding behaves normally.
echo > "$DEV/driver_override"
[ "$(driver_of)" = "$TARGET" ] || die "$BDF did not bind to $TARGET (bound to $(driver_of)); see dmesg | tail"
echo "vfio-unbind: $BDF bound to $TARGET"
if [ "$TARGET" = nvme ]; then
	for _ in $(seq 50); do ls -d "$DEV"/nvme/nvme*/nvme*n* >/dev/null 2>&1 && break; sleep 0.1; done
	for ns in "$DEV"/nvme/nvme*/nvme*n*; do [ -e "$ns" ] && echo "  /dev/${ns##*/}"; done
fi
exit 0
