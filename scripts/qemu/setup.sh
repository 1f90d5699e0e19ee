#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Prepare what the QEMU test harness (tests/qemu/run.sh) needs, on Debian 12:
#   - host packages qemu-system-x86 and cpio (apt-get install, root only, and
#     only when missing);
#   - a Debian cloud kernel (linux-image-*-cloud-amd64) and a static busybox
#     (busybox-static), fetched with `apt-get download` and unpacked into the
#     cache directory. Nothing is installed into the host's /boot or /bin.
#
#   With --generic instead: Debian's generic kernel (linux-image-*-amd64: it
#   has vgem and the other DRM drivers the kernel-module tests need) and its
#   headers (linux-headers-*-amd64, -common, linux-kbuild-*) unpacked so that
#   out-of-tree modules build against them (CACHE_DIR/kdir).
#
#   --kernel SERIES picks another of Debian 12's kernel series than the
#   release's own (6.1): e.g. 6.12, which bookworm-security carries
#   (linux-image-6.12-amd64, linux-headers-6.12.*+deb12-amd64 with -common
#   and linux-kbuild-6.12.*+deb12; built with gcc-12 like 6.1's). One cache
#   per series: scripts/qemu/setup.sh --generic --kernel 6.12
#   build/qemu-cache-kmod-6.12.
#
# Usage: scripts/qemu/setup.sh [--update] [--no-install] [--generic]
#                              [--kernel SERIES] CACHE_DIR
#   CACHE_DIR     e.g. build/qemu-cache; afterwards it holds
#                   vmlinuz        the guest kernel
#                   modules/       its /lib/modules/<version> (with modules.dep)
#                   busybox        a statically linked busybox
#                   kernel.version the kernel's version string
#                   kdir           (--generic) the headers: make -C kmod KDIR=CACHE_DIR/kdir
#   --update      fetch the newest kernel even when one is already cached
#   --no-install  never run apt-get install (only download into the cache)
#   --generic     the generic kernel and its headers (for tests/qemu kmod_*)
#   --kernel S    the kernel series S (6.12 ...: the meta-package
#                 linux-image-S-amd64, or -cloud-amd64 without --generic);
#                 default the release's (linux-image-amd64: 6.1). A cache
#                 holding another series is refused (replaced with --update).
#
# Idempotent: with a complete cache it does nothing and needs no network.
# Exit status: 0 ready, 1 failure.
set -euo pipefail

UPDATE=0
INSTALL=1
GENERIC=0
SERIES=
CACHE=
while [ $# -gt 0 ]; do
	case "$1" in
	--update) UPDATE=1 ;;
	--no-install) INSTALL=0 ;;
	--generic) GENERIC=1 ;;
	--kernel)
		[ $# -ge 2 ] || { echo "setup.sh: --kernel needs a series (6.12)" >&2; exit 1; }
		SERIES=$2
		shift
		;;
	-h|--help) sed -n '2,38p' "$0"; exit 0 ;;
	-*) echo "setup.sh: unknown option $1" >&2; exit 1 ;;
	*) CACHE=$1 ;;
	esac
	shift
done
[ -n "$CACHE" ] || { echo "usage: $0 [--update] [--no-install] [--generic] [--kernel SERIES] CACHE_DIR" >&2; exit 1; }
case $SERIES in
'' | [0-9]*.[0-9]*) ;;
*) echo "setup.sh: --kernel $SERIES: want a series such as 6.12" >&2; exit 1 ;;
esac
mkdir -p "$CACHE"
CACHE=$(cd "$CACHE" && pwd)

log() { echo "qemu-setup: $*"; }

SUDO=
[ "$(id -u)" -eq 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive

# ---- host packages --------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null 2>&1 || need+=(qemu-system-x86)
command -v cpio >/dev/null 2>&1 || need+=(cpio)
command -v gzip >/dev/null 2>&1 || need+=(gzip)
command -v depmod >/dev/null 2>&1 || need+=(kmod)
command -v timeout >/dev/null 2>&1 || need+=(coreutils)
if [ "$GENERIC" -eq 1 ]; then
	# Kbuild for out-of-tree modules: Debian's headers name gcc-12
	command -v make >/dev/null 2>&1 || need+=(make)
	command -v gcc-12 >/dev/null 2>&1 || need+=(gcc-12)
	# 6.12's headers carry vmlinux (BTF base): Kbuild runs pahole on
	# every module (linux-kbuild-6.12 depends on it; 6.1's skip BTF)
	command -v pahole >/dev/null 2>&1 || need+=(pahole)
fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$INSTALL" -eq 1 ]; then
		log "installing ${need[*]}"
		$SUDO apt-get install -y --no-install-recommends "${need[@]}" ||
			{ $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${need[@]}"; }
	else
		log "missing host tools (${need[*]}); rerun without --no-install" >&2
		exit 1
	fi
fi

# ---- cached kernel and busybox -------------------------------------------
complete() {
	[ -s "$CACHE/vmlinuz" ] && [ -s "$CACHE/modules/modules.dep" ] &&
		[ -x "$CACHE/busybox" ] && [ -s "$CACHE/kernel.version" ] &&
		{ [ "$GENERIC" -eq 0 ] || [ -s "$CACHE/kdir/Makefile" ]; }
}
# The headers' Makefile includes the -common tree by absolute path (set
# below when unpacked): point it at this cache wherever the cache now is (a
# cache restored or copied under another path kept the old one).
repoint_headers() {
	local mk
	mk=$(readlink -f "$CACHE/kdir/Makefile" 2>/dev/null) || return 0
	[ -s "$mk" ] && sed -i "s|^include .*/usr/src/|include $CACHE/headers/usr/src/|" "$mk"
	return 0
}
# A cache of another series is someone else's (the 6.1 cache given with
# --kernel 6.12): refused, not overwritten, unless --update says so.
if [ -n "$SERIES" ] && [ -s "$CACHE/kernel.version" ] && [ "$UPDATE" -eq 0 ] &&
	! grep -q "^${SERIES//./\\.}\\." "$CACHE/kernel.version"; then
	log "$CACHE holds kernel $(cat "$CACHE/kernel.version"), not series $SERIES: give another directory (or --update to replace it)" >&2
	exit 1
fi
if complete && [ "$UPDATE" -eq 0 ]; then
	[ "$GENERIC" -eq 0 ] || repoint_headers
	log "cache complete: kernel $(cat "$CACHE/kernel.version") in $CACHE"
	exit 0
fi

# The meta-package's Depends names the current versioned kernel package.
pkg_of_meta() {
	apt-cache depends "$1" 2>/dev/null |
		awk '/^ *Depends: linux-image-[0-9]/ { print $2; exit }'
}
FLAVOUR=cloud-amd64
[ "$GENERIC" -eq 0 ] || FLAVOUR=amd64
META=linux-image-${SERIES:+$SERIES-}$FLAVOUR
KPKG=$(pkg_of_meta "$META" || true)
if [ -z "$KPKG" ]; then
	log "apt-cache knows no $META; running apt-get update"
	$SUDO apt-get update >/dev/null || true
	KPKG=$(pkg_of_meta "$META" || true)
fi
[ -n "$KPKG" ] || { log "cannot find the kernel package $META depends on" >&2; exit 1; }
KVER=${KPKG#linux-image-}

DL="$CACHE/debs"
mkdir -p "$DL"
fetch_deb() {  # fetch_deb PACKAGE -> prints the .deb path
	local p=$1 f
	f=$(ls "$DL/${p}_"*.deb 2>/dev/null | head -n 1 || true)
	if [ -z "$f" ]; then
		(cd "$DL" && apt-get download -o APT::Sandbox::User=root "$p" >&2)
		f=$(ls "$DL/${p}_"*.deb | head -n 1)
	fi
	echo "$f"
}

log "kernel package $KPKG"
KDEB=$(fetch_deb "$KPKG")
rm -rf "$CACHE/kernel.tmp"
mkdir -p "$CACHE/kernel.tmp"
dpkg-deb -x "$KDEB" "$CACHE/kernel.tmp"
[ -d "$CACHE/kernel.tmp/lib/modules/$KVER" ] || { log "no /lib/modules/$KVER in $KDEB" >&2; exit 1; }
# Debian generates modules.dep in postinst; do it here for the unpacked tree.
depmod -b "$CACHE/kernel.tmp" "$KVER"
rm -rf "$CACHE/kernel"
mv "$CACHE/kernel.tmp" "$CACHE/kernel"
ln -sfn "kernel/boot/vmlinuz-$KVER" "$CACHE/vmlinuz"
ln -sfn "kernel/lib/modules/$KVER" "$CACHE/modules"

log "busybox-static"
BDEB=$(fetch_deb busybox-static)
rm -rf "$CACHE/busybox.tmp"
dpkg-deb -x "$BDEB" "$CACHE/busybox.tmp"
install -m 0755 "$CACHE/busybox.tmp/bin/busybox" "$CACHE/busybox"
rm -rf "$CACHE/busybox.tmp"

KEEP=("$(basename "$KDEB")" "$(basename "$BDEB")")
if [ "$GENERIC" -eq 1 ]; then
	# linux-headers-V-amd64 depends on linux-headers-V-common and
	# linux-kbuild-X.Y (which holds the prebuilt modpost & co.); the
	# packages' symlinks are relative, so one tree holds all three.
	HPKG=linux-headers-$KVER
	deps=$(apt-cache depends "$HPKG" 2>/dev/null | awk '/Depends: linux-(headers|kbuild)-/ { print $2 }')
	[ -n "$deps" ] || { log "apt-cache knows no $HPKG (or its dependencies)" >&2; exit 1; }
	rm -rf "$CACHE/headers.tmp"
	mkdir -p "$CACHE/headers.tmp"
	for p in "$HPKG" $deps; do
		log "headers package $p"
		f=$(fetch_deb "$p")
		KEEP+=("$(basename "$f")")
		dpkg-deb -x "$f" "$CACHE/headers.tmp"
	done
	hd=$CACHE/headers.tmp/usr/src/linux-headers-$KVER
	[ -s "$hd/Makefile" ] || { log "no usr/src/linux-headers-$KVER/Makefile in $HPKG" >&2; exit 1; }
	# Its Makefile includes the -common tree by absolute path (/usr/src/...)
	sed -i "s|^include /usr/src/|include $CACHE/headers/usr/src/|" "$hd/Makefile"
	rm -rf "$CACHE/headers"
	mv "$CACHE/headers.tmp" "$CACHE/headers"
	ln -sfn "headers/usr/src/linux-headers-$KVER" "$CACHE/kdir"
fi

echo "$KVER" > "$CACHE/kernel.version"
# Keep only the debs in use.
for f in "$DL"/*.deb; do
	keep=0
	for k in "${KEEP[@]}"; do [ "$(basename "$f")" = "$k" ] && keep=1; done
	[ "$keep" -eq 1 ] || rm -f "$f"
done
complete || { log "cache incomplete after setup" >&2; exit 1; }
log "ready: kernel $KVER, cache $CACHE"
