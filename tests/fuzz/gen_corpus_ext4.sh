#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Seeds for fuzz_ext4: whole 64 KiB images (1 KiB blocks, 32 inodes, no
# journal) made by mkfs.ext4 -d from a tiny tree. gen_corpus_ext4.sh OUTDIR
set -euo pipefail
out=${1:-$(dirname "$0")/corpus-ext4}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
mkdir -p "$out" "$t/src/d" "$t/src/e"
printf 'hello\n' > "$t/src/d/a"
head -c 3000 /dev/zero | tr '\0' 'x' > "$t/src/f"
# six one-block islands: more extents than the inode holds (a depth-1 tree)
truncate -s 12288 "$t/src/frag"
for i in 0 2 4 6 8 10; do printf 'y' | dd of="$t/src/frag" bs=1024 seek=$i conv=notrunc status=none; done
ln -s d/a "$t/src/link"
ln -s "$(printf 'p%.0s' $(seq 1 80))" "$t/src/longlink"
for i in 1 2 3 4 5 6; do : > "$t/src/e/entry$i"; done
common="-F -q -b 1024 -N 32 -I 256 -O ^has_journal,^resize_inode"
mk() {
	name=$1; shift
	rm -f "$t/img"; truncate -s 64k "$t/img"
	mkfs.ext4 $common "$@" -d "$t/src" "$t/img" >/dev/null
	cp "$t/img" "$out/$name"
}
mk ext4-csum -t ext4
mk ext4-nocsum -t ext4 -O ^metadata_csum,^64bit
mk ext2 -t ext2 -O ^resize_inode
rm -rf "$t/src/frag"
mk ext4-inline -t ext4 -O inline_data,^metadata_csum
mk ext4-inline-csum -t ext4 -O inline_data
