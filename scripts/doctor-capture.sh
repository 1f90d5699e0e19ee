#!/bin/sh
# SPDX-License-Identifier: BSD-2-Clause
#
# doctor-capture.sh OUTDIR: record what `gpunvme doctor` reads on this
# machine, so that `gpunvme doctor --root OUTDIR` elsewhere gives the same
# inventory and verdicts (bug reports, test fixtures, a QEMU guest).
#
# Copies exactly the sysfs/procfs subset the doctor reads (src/doctor/
# doctor.c; the two must agree: tests/doctor/doctor_cli.sh captures every
# fixture with this script and compares the doctor's JSON on both):
#   - /sys/bus/pci/devices/* symlinks, kept as symlinks into /sys/devices/
#     pci*/... (the doctor reads the PCIe path from them), and per device
#     the attributes in ATTRS, the config space bytes (4096 as root, 64 or
#     256 otherwise), the symlinks driver and iommu_group; for NVMe
#     controllers owned by the kernel, nvme/nvmeX/{model, <ns>/queue/
#     max_hw_sectors_kb, <ns>/mq/N};
#   - /sys/kernel/iommu_groups/N/type, /sys/class/iommu/X (names only),
#     /sys/module/{MODULES} (presence), the few module parameters and
#     versions below, 2 MiB hugepage counts;
#   - /proc/cmdline, /proc/mounts, /proc/driver/nvidia/version and
#     gpus/*/information;
#   - doctor-extra.txt: what is no file: "memlock <bytes>|unlimited".
# Nothing else (no serial numbers beyond what those files hold).
#
# POSIX sh and cat, mkdir, ln, rm; readlink when present, else `ls -l`.
# Works under busybox. Run as root for the full config space (ACS lives
# beyond byte 256). DOCTOR_CAPTURE_SRC=DIR reads DIR/sys and DIR/proc
# instead of /sys and /proc (the tests capture their fixtures with it).
set -u

ATTRS="vendor device class numa_node current_link_speed current_link_width power_state resource config"
MODULES="vfio vfio_pci uio_pci_generic gpunvme nvidia"
GLOBAL_FILES="sys/module/vfio/parameters/enable_unsafe_noiommu_mode sys/module/nvidia/version sys/module/nvidia/taint
sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages
proc/cmdline proc/mounts proc/driver/nvidia/version"

OUT=${1:-}
if [ -z "$OUT" ] || [ "$OUT" = "-h" ] || [ "$OUT" = "--help" ]; then
	echo "usage: doctor-capture.sh OUTDIR   (then: gpunvme doctor --root OUTDIR)" >&2
	exit 2
fi
SRC=${DOCTOR_CAPTURE_SRC:-}

die() {
	echo "doctor-capture: $*" >&2
	exit 1
}

[ -d "$SRC/sys/bus/pci/devices" ] || echo "doctor-capture: no $SRC/sys/bus/pci/devices: capturing no PCI devices" >&2
mkdir -p "$OUT/sys/bus/pci/devices" "$OUT/proc" || die "cannot create $OUT"

# link_target PATH: the symlink's target text
link_target() {
	if command -v readlink >/dev/null 2>&1; then
		readlink "$1"
	else
		l=$(ls -ld "$1") || return 1
		printf '%s\n' "${l#* -> }"
	fi
}

# copy REL: a regular file from SRC to OUT, when readable
copy() {
	[ -f "$SRC/$1" ] || return 0
	mkdir -p "$OUT/${1%/*}" || die "cannot create $OUT/${1%/*}"
	cat "$SRC/$1" >"$OUT/$1" 2>/dev/null || rm -f "$OUT/$1"
}

# relink REL: a symlink, same target text
relink() {
	[ -L "$SRC/$1" ] || return 0
	t=$(link_target "$SRC/$1") || return 0
	mkdir -p "$OUT/${1%/*}"
	rm -f "$OUT/$1"
	ln -s "$t" "$OUT/$1" || die "cannot create the link $OUT/$1"
}

# names DIR: recreate the entries of a directory as empty directories
names() {
	[ -d "$SRC/$1" ] || return 0
	mkdir -p "$OUT/$1"
	for e in "$SRC/$1"/*; do
		[ -e "$e" ] || [ -L "$e" ] || continue
		mkdir -p "$OUT/$1/${e##*/}"
	done
}

for f in $GLOBAL_FILES; do
	copy "$f"
done
for m in $MODULES; do
	[ -d "$SRC/sys/module/$m" ] && mkdir -p "$OUT/sys/module/$m"
done
names sys/kernel/iommu_groups
for g in "$SRC/sys/kernel/iommu_groups"/*; do
	[ -d "$g" ] && copy "sys/kernel/iommu_groups/${g##*/}/type"
done
names sys/class/iommu

n=0
for link in "$SRC/sys/bus/pci/devices"/*; do
	[ -L "$link" ] || continue
	bdf=${link##*/}
	t=$(link_target "$link") || continue
	case "$t" in
	/sys/*) rel=${t#/sys/} ;;
	*) rel=$t; while [ "${rel#../}" != "$rel" ]; do rel=${rel#../}; done ;;
	esac
	case "$rel" in
	devices/*) ;;
	*) echo "doctor-capture: $bdf links to $t, not into devices/: skipped" >&2; continue ;;
	esac
	dev="sys/$rel"
	mkdir -p "$OUT/$dev" || die "cannot create $OUT/$dev"
	ln -s "$t" "$OUT/sys/bus/pci/devices/$bdf" 2>/dev/null || die "cannot create the link for $bdf"
	for a in $ATTRS; do
		copy "$dev/$a"
	done
	relink "$dev/driver"
	relink "$dev/iommu_group"
	for c in "$SRC/$dev/nvme"/nvme*; do
		[ -d "$c" ] || continue
		k="$dev/nvme/${c##*/}"
		mkdir -p "$OUT/$k"
		copy "$k/model"
		for ns in "$SRC/$k"/nvme*n*; do
			[ -d "$ns" ] || continue
			s="$k/${ns##*/}"
			mkdir -p "$OUT/$s"
			copy "$s/queue/max_hw_sectors_kb"
			names "$s/mq"
		done
	done
	n=$((n + 1))
done

for g in "$SRC/proc/driver/nvidia/gpus"/*; do
	[ -d "$g" ] && copy "proc/driver/nvidia/gpus/${g##*/}/information"
done

if [ -n "$SRC" ] && [ -f "$SRC/doctor-extra.txt" ]; then
	cat "$SRC/doctor-extra.txt" >"$OUT/doctor-extra.txt"
else
	l=$(ulimit -l 2>/dev/null || echo "")
	case "$l" in
	unlimited) echo "memlock unlimited" >"$OUT/doctor-extra.txt" ;;
	'' | *[!0-9]*) : >"$OUT/doctor-extra.txt" ;;
	*) echo "memlock $((l * 1024))" >"$OUT/doctor-extra.txt" ;;
	esac
fi
echo "doctor-capture: $n PCI functions captured into $OUT; read it with: gpunvme doctor --root $OUT" >&2
