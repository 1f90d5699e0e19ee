#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Build kmod/gpunvme.ko out of the source tree, warnings as errors (W=1).
#
# Usage: scripts/kmod-build.sh [KDIR [OUTDIR]]
#   KDIR    kernel headers (default: /lib/modules/$(uname -r)/build; the QEMU
#           tests use the cache of scripts/qemu/setup.sh --generic: CACHE/kdir)
#   OUTDIR  where the sources are copied and gpunvme.ko is built
#           (default: build/kmod-$(kernel release of KDIR))
# Exit status: 0 built, 1 failure, 77 no headers at KDIR (the message says
# which package to install; 1 when GPUNVME_QEMU_REQUIRED=1, as in CI).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
KDIR=${1:-/lib/modules/$(uname -r)/build}
if [ ! -f "$KDIR/Makefile" ]; then
	echo "kmod-build: no kernel headers at $KDIR: install linux-headers-$(uname -r) (Debian/Ubuntu: apt-get install linux-headers-$(uname -r)), or pass the headers' directory; for the QEMU tests run scripts/qemu/setup.sh --generic build/qemu-cache-kmod" >&2
	[ "${GPUNVME_QEMU_REQUIRED:-0}" = 1 ] && exit 1
	exit 77
fi
KDIR=$(cd "$KDIR" && pwd)
# Headers that ship vmlinux with CONFIG_DEBUG_INFO_BTF_MODULES (Debian's
# 6.12) make Kbuild run pahole on the module
if [ -f "$KDIR/vmlinux" ] && grep -qs '^CONFIG_DEBUG_INFO_BTF_MODULES=y' "$KDIR/.config" &&
	! command -v pahole >/dev/null 2>&1; then
	echo "kmod-build: the headers at $KDIR generate module BTF with pahole: install it (apt-get install pahole; scripts/qemu/setup.sh --generic does)" >&2
	[ "${GPUNVME_QEMU_REQUIRED:-0}" = 1 ] && exit 1
	exit 77
fi
REL=$(cat "$KDIR/include/config/kernel.release" 2>/dev/null || basename "$KDIR")
OUT=${2:-$ROOT/build/kmod-$REL}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
cp "$ROOT/kmod/gpunvme.c" "$ROOT/kmod/Kbuild" "$OUT/"
# W=1: the kernel's extra warnings; Kbuild adds -Werror
make -C "$KDIR" M="$OUT" GPUNVME_INCLUDE="$ROOT/include" W=1 modules
echo "kmod-build: $OUT/gpunvme.ko for $REL"
