# SPDX-License-Identifier: BSD-2-Clause
# Shared by the bind scripts (vfio-bind.sh, kmod-bind.sh, vfio-unbind.sh):
# PCI addresses, the bound driver, whether the kernel still uses a
# controller's namespaces, and a driver_override rebind. Sourced, not run.
# SYS and PROC name the sysfs and procfs roots (tests use fake ones).
SYS=${SYS:-/sys}
PROC=${PROC:-/proc}

# pci_bdf ADDR: DDDD:BB:DD.F (lower case, domain added) on stdout, or
# status 1 when ADDR is not a PCI address.
pci_bdf() {
	local b
	b=$(echo "$1" | tr 'A-F' 'a-f')
	[[ $b =~ ^[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$ ]] && b=0000:$b
	[[ $b =~ ^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$ ]] || return 1
	echo "$b"
}

# pci_driver_of BDF: the bound driver's name, or "none".
pci_driver_of() {
	if [ -e "$SYS/bus/pci/devices/$1/driver" ]; then
		basename "$(readlink "$SYS/bus/pci/devices/$1/driver")"
	else
		echo none
	fi
}

# pci_nvme_busy BDF: why the kernel still needs the controller's namespaces
# (mounted, swap, held by md/LVM/dm), one " nvme0n1(...)" per use; empty
# when idle. Pulling a disk in use loses its file systems; swap on it
# crashes the machine.
pci_nvme_busy() {
	local ns name h busy=
	for ns in "$SYS/bus/pci/devices/$1"/nvme/nvme*/nvme*n*; do
		[ -e "$ns" ] || continue
		name=${ns##*/}
		if grep -qE "^/dev/${name}(p[0-9]+)? " "$PROC/mounts" "$PROC/swaps" 2>/dev/null; then
			busy="$busy $name(mounted)"
		fi
		for h in "$ns"/holders/* "$ns"/"$name"p*/holders/*; do
			[ -e "$h" ] && busy="$busy $name(held by ${h##*/})"
		done
	done
	echo "$busy"
}

# pci_rebind BDF DRIVER TAG: unbind from the current driver, bind to DRIVER
# through driver_override (so only this device goes to it), wait up to 5 s.
pci_rebind() {
	local bdf=$1 drv=$2 tag=$3 cur dev=$SYS/bus/pci/devices/$1
	cur=$(pci_driver_of "$bdf")
	if [ "$cur" != "$drv" ]; then
		if [ "$cur" != none ]; then
			echo "$tag: unbinding $bdf from $cur"
			echo "$bdf" > "$dev/driver/unbind"
		fi
		echo "$drv" > "$dev/driver_override"
		echo "$bdf" > "$SYS/bus/pci/drivers_probe" || true
		for _ in $(seq 50); do [ "$(pci_driver_of "$bdf")" = "$drv" ] && break; sleep 0.1; done
	fi
	[ "$(pci_driver_of "$bdf")" = "$drv" ]
}
