#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# Seeds for fuzz_part: 64 KiB disks (128 sectors of 512 bytes) with tables
# written by sfdisk, and a bare ext2 file system. gen_corpus_part.sh OUTDIR
set -euo pipefail
out=${1:?usage: gen_corpus_part.sh OUTDIR}
command -v sfdisk >/dev/null 2>&1 || { echo "gen_corpus_part: no sfdisk" >&2; exit 1; }
mkdir -p "$out"
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
disk() { rm -f "$t/d"; truncate -s 64k "$t/d"; printf '%b' "$2" | sfdisk -q "$t/d" >/dev/null; cp "$t/d" "$out/$1"; }
# GPT: entries LBA 2-33, usable 34..94, backup entries 95-126, header 127
disk gpt 'label: gpt\nstart=34, size=30, name=models\nstart=64, size=30\n'
disk mbr 'label: dos\nstart=1, size=20, type=83\nstart=21, size=60, type=5\nstart=22, size=10, type=83\nstart=40, size=20, type=83\n'
disk mbr-primary 'label: dos\nstart=1, size=100, type=83\n'
if command -v mkfs.ext4 >/dev/null 2>&1; then
	rm -f "$t/f"; truncate -s 64k "$t/f"
	mkfs.ext4 -q -F -t ext2 -b 1024 -N 16 -O ^resize_inode "$t/f" >/dev/null && cp "$t/f" "$out/bare-ext2"
fi
