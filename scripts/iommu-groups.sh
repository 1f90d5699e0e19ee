#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# List IOMMU groups and their devices, marking NVMe controllers, so you can
# see whether an SSD shares its group (and must share vfio-pci) with others.
#
# Usage: scripts/iommu-groups.sh [--nvme]
#   --nvme   show only the groups that hold an NVMe controller
set -euo pipefail

usage() { sed -n '3,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

ONLY_NVME=0
while [ $# -gt 0 ]; do
	case "$1" in
	--nvme) ONLY_NVME=1 ;;
	-h|--help) usage ;;
	*) echo "iommu-groups: unknown argument $1" >&2; usage ;;
	esac
	shift
done

shopt -s nullglob
groups=(/sys/kernel/iommu_groups/*)
if [ ${#groups[@]} -eq 0 ]; then
	echo "iommu-groups: no IOMMU groups: the IOMMU is off. Enable VT-d / AMD-Vi in the BIOS and boot with" \
		"intel_iommu=on (Intel) or amd_iommu=on (AMD); see docs/hardware.md" >&2
	echo "NVMe controllers without an IOMMU group:"
	for d in /sys/bus/pci/devices/*; do
		[ "$(cat "$d/class")" = 0x010802 ] || continue
		drv=none
		[ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
		echo "  ${d##*/} $(sed 's/^0x//' "$d/vendor"):$(sed 's/^0x//' "$d/device") driver=$drv"
	done
	exit 1
fi

HAVE_LSPCI=0
command -v lspci >/dev/null 2>&1 && HAVE_LSPCI=1

for g in $(printf '%s\n' "${groups[@]##*/}" | sort -n); do
	devs=(/sys/kernel/iommu_groups/"$g"/devices/*)
	has_nvme=0
	for d in "${devs[@]}"; do [ "$(cat "$d/class")" = 0x010802 ] && has_nvme=1; done
	[ "$ONLY_NVME" -eq 0 ] || [ "$has_nvme" -eq 1 ] || continue
	type=$(cat /sys/kernel/iommu_groups/"$g"/type 2>/dev/null || echo "?")
	echo "group $g (type $type, ${#devs[@]} device$([ ${#devs[@]} -eq 1 ] || echo s))"
	for d in "${devs[@]}"; do
		b=${d##*/}
		drv=none
		[ -e "$d/driver" ] && drv=$(basename "$(readlink "$d/driver")")
		if [ "$HAVE_LSPCI" -eq 1 ]; then
			desc=$(lspci -nns "$b" | cut -d' ' -f2-)
		else
			desc="$(cat "$d/class") $(sed 's/^0x//' "$d/vendor"):$(sed 's/^0x//' "$d/device")"
		fi
		mark=
		[ "$(cat "$d/class")" = 0x010802 ] && mark="  <-- NVMe: vfio:$b"
		echo "  $b [$drv] $desc$mark"
	done
done
