#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# scripts/kmod-bind.sh against a fake sysfs/procfs: it refuses a controller
# whose namespace is mounted (or held by dm), a non-NVMe device and a bad
# address; --force and an idle controller pass its checks (--dry-run).
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
export GPUNVME_SYSFS_ROOT=$T/sys GPUNVME_PROC_ROOT=$T/proc
D=$T/sys/bus/pci/devices/0000:01:00.0
mkdir -p "$D/nvme/nvme0/nvme0n1/holders" "$T/sys/bus/pci/drivers/nvme" "$T/proc" "$T/sys/bus/pci/devices/0000:02:00.0"
echo 0x010802 > "$D/class"
echo 0x030000 > "$T/sys/bus/pci/devices/0000:02:00.0/class"
ln -s "$T/sys/bus/pci/drivers/nvme" "$D/driver"
: > "$T/proc/swaps"
fails=0
expect() {  # expect RC GREP ARGS...
	local want=$1 pat=$2 out rc
	shift 2
	out=$("$ROOT/scripts/kmod-bind.sh" --dry-run "$@" 2>&1); rc=$?
	if [ "$rc" -eq "$want" ] && echo "$out" | grep -q -- "$pat"; then
		echo "PASS kmod-bind $*: rc $rc: $out"
	else
		echo "FAIL kmod-bind $*: rc $rc (want $want), output: $out (want /$pat/)"; fails=$((fails + 1))
	fi
}
echo "/dev/nvme0n1p2 /data ext4 rw 0 0" > "$T/proc/mounts"
expect 1 "in use by the kernel: nvme0n1(mounted)" 0000:01:00.0
expect 1 "in use by the kernel" 01:00.0
expect 0 "would unbind" --force 0000:01:00.0
: > "$T/proc/mounts"
touch "$D/nvme/nvme0/nvme0n1/holders/dm-0"
expect 1 "held by dm-0" 0000:01:00.0
rm "$D/nvme/nvme0/nvme0n1/holders/dm-0"
expect 0 "would unbind 0000:01:00.0 from nvme" 0000:01:00.0
expect 1 "not an NVMe controller" 0000:02:00.0
expect 1 "not a PCI address" 1:2:3
expect 1 "no PCI device" 0000:09:00.0
[ "$fails" -eq 0 ]
