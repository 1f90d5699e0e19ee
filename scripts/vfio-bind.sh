#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Bind an NVMe controller to vfio-pci so gpunvme can open it as vfio:BDF.
#
# Usage: sudo scripts/vfio-bind.sh [--force] [--user USER] BDF
#   BDF        PCI address, DDDD:BB:DD.F or BB:DD.F (lspci -D -nn | grep -i nvme)
#   --user U   give /dev/vfio/N to user U (default: $SUDO_USER when run
#              with sudo), so gpunvme can run without root
#   --force    unbind even when a namespace of the controller is mounted,
#              in use as swap, or part of an md/LVM device
#
# Prints the IOMMU group and every device in it: all of them must be bound to
# vfio-pci (or to no driver) for VFIO to accept the group.
# Undo with scripts/vfio-unbind.sh BDF.
set -euo pipefail

usage() { sed -n '3,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
die() { echo "vfio-bind: $*" >&2; exit 1; }
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib-pci.sh"

FORCE=0
OWNER=${SUDO_USER:-}
BDF=
while [ $# -gt 0 ]; do
	case "$1" in
	--force) FORCE=1 ;;
	--user) [ $# -ge 2 ] || usage; OWNER=$2; shift ;;
	-h|--help) usage ;;
	-*) echo "vfio-bind: unknown option $1" >&2; usage ;;
	*) [ -z "$BDF" ] || usage; BDF=$1 ;;
	esac
	shift
done
[ -n "$BDF" ] || usage

ADDR=$(pci_bdf "$BDF") ||
	die "'$BDF' is not a PCI address: expected DDDD:BB:DD.F, e.g. 0000:01:00.0 (lspci -D -nn | grep -i nvme)"
BDF=$ADDR
[ "$(id -u)" -eq 0 ] || die "needs root: sudo $0 $BDF"

DEV=/sys/bus/pci/devices/$BDF
[ -e "$DEV" ] || die "no PCI device $BDF: find the address with lspci -D -nn | grep -i nvme"
CLASS=$(cat "$DEV/class")
[ "$CLASS" = 0x010802 ] || echo "vfio-bind: warning: $BDF is class $CLASS, not an NVMe controller (0x010802)" >&2

CUR=$(pci_driver_of "$BDF")

# Refuse to pull a disk out from under the kernel while it is in use.
if [ "$CUR" = nvme ] && [ "$FORCE" -eq 0 ]; then
	busy=$(pci_nvme_busy "$BDF")
	[ -z "$busy" ] || die "$BDF is in use by the kernel:$busy; unmount / swapoff / stop it first, or pass --force"
fi

if [ ! -e "$DEV/iommu_group" ]; then
	noiommu=$(cat /sys/module/vfio/parameters/enable_unsafe_noiommu_mode 2>/dev/null || echo N)
	[ "$noiommu" = Y ] || die "$BDF has no IOMMU group: the IOMMU is off. Enable VT-d / AMD-Vi in the BIOS and boot with intel_iommu=on (Intel) or amd_iommu=on (AMD); or, without an IOMMU, use uio:$BDF (see docs/hardware.md) or 'modprobe vfio enable_unsafe_noiommu_mode=1'"
fi

modprobe vfio-pci 2>/dev/null || [ -d /sys/bus/pci/drivers/vfio-pci ] ||
	die "cannot load the vfio-pci module (modprobe vfio-pci): is it built for this kernel?"

pci_rebind "$BDF" vfio-pci vfio-bind ||
	die "$BDF did not bind to vfio-pci (bound to $(pci_driver_of "$BDF")); see dmesg | tail"

GROUP=$(basename "$(readlink "$DEV/iommu_group")")
NODE=/dev/vfio/$GROUP
[ -e "$NODE" ] || NODE=/dev/vfio/noiommu-$GROUP
for _ in $(seq 50); do [ -c "$NODE" ] && break; sleep 0.1; done
[ -c "$NODE" ] || die "no /dev/vfio/$GROUP after binding: is udev running? ls -l /dev/vfio"

if [ -n "$OWNER" ]; then
	chown "$OWNER" "$NODE"
	echo "vfio-bind: $NODE now belongs to $OWNER (locked memory limit for that user: see docs/hardware.md)"
fi

echo "vfio-bind: $BDF bound to vfio-pci, IOMMU group $GROUP ($NODE)"
viable=1
for d in /sys/kernel/iommu_groups/"$GROUP"/devices/*; do
	b=${d##*/}
	drv=$(pci_driver_of "$b")
	mark=
	case $drv in
	vfio-pci|pci-stub|none) ;;
	pcieport) mark="  (bridge: normally accepted)" ;;
	*) mark="  <-- must be bound to vfio-pci too (scripts/vfio-bind.sh $b)"; viable=0 ;;
	esac
	echo "  $b $(cat "$d/class") $(sed 's/^0x//' "$d/vendor"):$(sed 's/^0x//' "$d/device") driver=$drv$mark"
done
if [ "$viable" -eq 1 ]; then
	echo "vfio-bind: open it as vfio:$BDF"
else
	echo "vfio-bind: the group is not viable yet: bind the marked devices too, or move the SSD to another slot" >&2
	exit 1
fi
