#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Build the initramfs (gzip'd newc cpio) that the QEMU test guest boots from:
#   /bin/busybox (+ applet links made at boot), /init, /guest.sh, /plan,
#   /lib/modules/*.ko (uncompressed) with /etc/modules.load in dependency
#   order, and the test executables in /tests (must be statically linked).
#
# Usage: scripts/qemu/mkinitramfs.sh -c CACHE_DIR -o OUT.cpio.gz
#            [-g GUEST_SH] [-p PLAN] [-m MODULE]... [-f SRC:DEST]... [BINARY...]
#   -c  cache prepared by scripts/qemu/setup.sh (vmlinuz, modules/, busybox)
#   -o  output initramfs
#   -g  guest script run by /init (default: tests/qemu/guest.sh)
#   -p  plan file the guest script executes (default: empty plan)
#   -m  kernel module to include with its dependencies, by name; default:
#       vfio vfio_iommu_type1 vfio_pci uio uio_pci_generic nvme nvme_core
#       (modules built into the kernel are skipped)
#   -f  extra file: copy SRC to DEST inside the image
#   BINARY  test executables, copied to /tests/<basename>
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=
OUT=
GUEST="$ROOT/tests/qemu/guest.sh"
PLAN=
MODS=()
EXTRA=()
while getopts "c:o:g:p:m:f:h" opt; do
	case $opt in
	c) CACHE=$OPTARG ;;
	o) OUT=$OPTARG ;;
	g) GUEST=$OPTARG ;;
	p) PLAN=$OPTARG ;;
	m) MODS+=("$OPTARG") ;;
	f) EXTRA+=("$OPTARG") ;;
	h) sed -n '2,20p' "$0"; exit 0 ;;
	*) exit 1 ;;
	esac
done
shift $((OPTIND - 1))
[ -n "$CACHE" ] && [ -n "$OUT" ] || { echo "usage: $0 -c CACHE -o OUT [-g GUEST] [-p PLAN] [-m MOD]... [BIN...]" >&2; exit 1; }
[ ${#MODS[@]} -gt 0 ] || MODS=(vfio vfio_iommu_type1 vfio_pci uio uio_pci_generic nvme nvme_core)

die() { echo "mkinitramfs: $*" >&2; exit 1; }
MODDIR="$CACHE/modules"
[ -s "$MODDIR/modules.dep" ] || die "no $MODDIR/modules.dep (run scripts/qemu/setup.sh $CACHE)"
[ -x "$CACHE/busybox" ] || die "no $CACHE/busybox (run scripts/qemu/setup.sh $CACHE)"
[ -f "$GUEST" ] || die "no guest script $GUEST"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/gpunvme-initramfs.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE"/{bin,sbin,dev,proc,sys,tmp,etc,tests,lib/modules,mnt,run}
cp "$CACHE/busybox" "$STAGE/bin/busybox"

# ---- kernel modules, dependencies first ----------------------------------
norm() { local n=${1##*/}; n=${n%%.ko*}; echo "${n//-/_}"; }
declare -A PATH_OF=() DEPS_OF=() SEEN=()
while IFS= read -r line; do
	key=${line%%:*}
	PATH_OF[$(norm "$key")]=$key
	DEPS_OF[$key]=${line#*:}
done < "$MODDIR/modules.dep"
builtin_mod() {
	[ -f "$MODDIR/modules.builtin" ] &&
		sed 's,.*/,,; s,\.ko.*,,; s,-,_,g' "$MODDIR/modules.builtin" | grep -qx "$1"
}
ORDER=()
add_mod() {  # add_mod RELPATH: dependencies first (modules.dep lists them)
	local rel=$1 d
	[ -z "${SEEN[$rel]:-}" ] || return 0
	SEEN[$rel]=1
	for d in ${DEPS_OF[$rel]}; do add_mod "$d"; done
	ORDER+=("$rel")
}
for m in "${MODS[@]}"; do
	n=$(norm "$m")
	if [ -n "${PATH_OF[$n]:-}" ]; then
		add_mod "${PATH_OF[$n]}"
	elif builtin_mod "$n"; then
		:
	else
		die "module $m is neither in modules.dep nor built in"
	fi
done
: > "$STAGE/etc/modules.load"
for rel in "${ORDER[@]}"; do
	src="$MODDIR/$rel"
	name=$(norm "$rel").ko
	# busybox insmod only loads plain ELF modules: decompress here.
	case "$rel" in
	*.ko.xz) xz -dc "$src" > "$STAGE/lib/modules/$name" ;;
	*.ko.zst) zstd -qdc "$src" > "$STAGE/lib/modules/$name" ;;
	*.ko.gz) gzip -dc "$src" > "$STAGE/lib/modules/$name" ;;
	*.ko) cp "$src" "$STAGE/lib/modules/$name" ;;
	*) die "unknown module format $rel" ;;
	esac
	echo "$name" >> "$STAGE/etc/modules.load"
done

# ---- scripts, plan, test binaries ----------------------------------------
cat > "$STAGE/init" <<'EOF'
#!/bin/busybox sh
# gpu-nvme-direct QEMU test guest: mount, load modules, run /guest.sh /plan.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin:/tests
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages
echo "QEMU-GUEST kernel $(uname -r) cmdline: $(cat /proc/cmdline)"
for m in $(cat /etc/modules.load); do
	insmod "/lib/modules/$m" || echo "QEMU-GUEST insmod $m failed"
done
sh /guest.sh /plan
echo "QEMU-GUEST guest.sh exited rc=$?; powering off"
sync
poweroff -f
EOF
chmod 0755 "$STAGE/init"
install -m 0755 "$GUEST" "$STAGE/guest.sh"
if [ -n "$PLAN" ]; then cp "$PLAN" "$STAGE/plan"; else : > "$STAGE/plan"; fi

is_static() {  # no PT_INTERP / dynamic section
	if command -v readelf >/dev/null 2>&1; then
		if readelf -lW "$1" 2>/dev/null | grep -q 'Requesting program interpreter'; then
			return 1
		fi
		return 0
	else
		LC_ALL=C ldd "$1" 2>&1 | grep -Eq 'not a dynamic executable|statically linked'
	fi
}
for b in "$@"; do
	[ -f "$b" ] || die "no test binary $b"
	is_static "$b" || die "$b is dynamically linked; the guest has no libc (link with -static)"
	install -m 0755 "$b" "$STAGE/tests/$(basename "$b")"
done
for e in "${EXTRA[@]}"; do
	src=${e%%:*} dst=${e#*:}
	mkdir -p "$STAGE/$(dirname "$dst")"
	cp "$src" "$STAGE/$dst"
done

mkdir -p "$(dirname "$OUT")"
(cd "$STAGE" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc --quiet -R 0:0) |
	gzip -1 > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
