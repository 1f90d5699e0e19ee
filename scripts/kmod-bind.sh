#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Bind an NVMe controller to the gpunvme kernel module (kmod/) so gpunvme can
# open it as kmod:BDF. The module binds only controllers named this way
# (driver_override), never the boot disk by itself.
#
# Usage: sudo scripts/kmod-bind.sh [--force] [--user USER] [--ko PATH] [--dry-run] BDF
#   BDF        PCI address, DDDD:BB:DD.F or BB:DD.F (lspci -D -nn | grep -i nvme)
#   --user U   give /dev/gpunvme/BDF to user U (default: $SUDO_USER with sudo)
#   --ko PATH  load the module from PATH when it is not loaded (default:
#              modprobe gpunvme, then kmod/gpunvme.ko of this tree)
#   --force    unbind even when a namespace of the controller is mounted,
#              in use as swap, or held by md/LVM/dm
#   --dry-run  check and say what would be done; change nothing (no root needed)
# GPUNVME_SYSFS_ROOT and GPUNVME_PROC_ROOT replace /sys and /proc (tests).
# Undo: scripts/vfio-unbind.sh BDF (binds it back to nvme).
set -euo pipefail

usage() { sed -n '3,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "kmod-bind: $*" >&2; exit 1; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SYS=${GPUNVME_SYSFS_ROOT:-/sys}
PROC=${GPUNVME_PROC_ROOT:-/proc}
. "$HERE/lib-pci.sh"
FORCE=0
DRY=0
OWNER=${SUDO_USER:-}
KO=
BDF=
while [ $# -gt 0 ]; do
	case "$1" in
	--force) FORCE=1 ;;
	--dry-run) DRY=1 ;;
	--user) [ $# -ge 2 ] || usage; OWNER=$2; shift ;;
	--ko) [ $# -ge 2 ] || usage; KO=$2; shift ;;
	-h|--help) usage ;;
	-*) echo "kmod-bind: unknown option $1" >&2; usage ;;
	*) [ -z "$BDF" ] || usage; BDF=$1 ;;
	esac
	shift
done
[ -n "$BDF" ] || usage

ADDR=$(pci_bdf "$BDF") ||
	die "'$BDF' is not a PCI address: expected DDDD:BB:DD.F, e.g. 0000:01:00.0 (lspci -D -nn | grep -i nvme)"
BDF=$ADDR
[ "$DRY" -eq 1 ] || [ "$(id -u)" -eq 0 ] || die "needs root: sudo $0 $BDF"

DEV=$SYS/bus/pci/devices/$BDF
[ -e "$DEV" ] || die "no PCI device $BDF: find the address with lspci -D -nn | grep -i nvme"
CLASS=$(cat "$DEV/class")
[ "$CLASS" = 0x010802 ] || die "$BDF is class $CLASS, not an NVMe controller (0x010802): the module drives NVMe controllers only"
CUR=$(pci_driver_of "$BDF")

if [ "$CUR" = nvme ]; then
	busy=$(pci_nvme_busy "$BDF")
	if [ -n "$busy" ]; then
		[ "$FORCE" -eq 1 ] || die "$BDF is in use by the kernel:$busy; unmount / swapoff / stop it first, or pass --force"
		echo "kmod-bind: --force: taking $BDF although in use:$busy" >&2
	fi
fi

if [ "$DRY" -eq 1 ]; then
	echo "kmod-bind: dry run: would unbind $BDF from $CUR, load gpunvme, set driver_override and probe"
	exit 0
fi

if [ ! -d "$SYS/bus/pci/drivers/gpunvme" ]; then
	if [ -n "$KO" ]; then
		insmod "$KO" || die "insmod $KO failed (see dmesg | tail): built for this kernel? make -C kmod"
	elif ! modprobe gpunvme 2>/dev/null; then
		KO=$HERE/../kmod/gpunvme.ko
		[ -f "$KO" ] || die "the gpunvme module is not installed: build it with make -C kmod (needs linux-headers-$(uname -r)), then rerun"
		insmod "$KO" || die "insmod $KO failed (see dmesg | tail): rebuild it for this kernel (make -C kmod clean all)"
	fi
fi

pci_rebind "$BDF" gpunvme kmod-bind ||
	die "$BDF did not bind to gpunvme (bound to $(pci_driver_of "$BDF")); see dmesg | tail"
NODE=/dev/gpunvme/$BDF
for _ in $(seq 50); do [ -c "$NODE" ] && break; sleep 0.1; done
[ -c "$NODE" ] || die "no $NODE after binding: is devtmpfs mounted on /dev? ls -l /dev/gpunvme"
if [ -n "$OWNER" ]; then
	chown "$OWNER" "$NODE"
	echo "kmod-bind: $NODE now belongs to $OWNER (pinned memory counts against that user's ulimit -l)"
fi
echo "kmod-bind: $BDF bound to gpunvme ($NODE); open it as kmod:$BDF"
